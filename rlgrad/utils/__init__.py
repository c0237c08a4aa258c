"""``rlgrad.utils``: the parts of ``torch.utils`` RL scripts import (``tensorboard``)."""
