"""``stable_baselines3.common.sb2_compat``: Stable-Baselines 2 (TensorFlow) compatibility."""
