"""``stable_baselines3.common.logger`` -> ``rlgrad.rl.logger``."""

from rlgrad.rl.logger import (
    DEBUG,
    DISABLED,
    ERROR,
    INFO,
    WARN,
    CSVOutputFormat,
    CSVWriter,
    Figure,
    FormatUnsupportedError,
    HParam,
    HumanOutputFormat,
    HumanWriter,
    Image,
    JSONOutputFormat,
    KVWriter,
    Logger,
    SeqWriter,
    TensorBoardOutputFormat,
    TensorBoardWriter,
    Video,
    configure,
    make_output_format,
    read_csv,
    read_json,
)

__all__ = ["CSVOutputFormat", "CSVWriter", "DEBUG", "DISABLED", "ERROR", "Figure",
           "FormatUnsupportedError", "HParam", "HumanOutputFormat", "HumanWriter", "INFO", "Image",
           "JSONOutputFormat", "KVWriter", "Logger", "SeqWriter", "TensorBoardOutputFormat",
           "TensorBoardWriter", "Video", "WARN", "configure", "make_output_format", "read_csv",
           "read_json"]
