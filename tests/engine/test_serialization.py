"""rlgrad.save / rlgrad.load: bit-exact round trips, one atomic file, clear errors, no pickle."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import safetensors.numpy

import rlgrad
from rlgrad import nn, optim, serialization
from rlgrad.serialization import CheckpointDict, CheckpointError


def sample_checkpoint() -> dict:
    rng = np.random.default_rng(0)
    return {
        "model": {"0.weight": rng.standard_normal((3, 2)).astype(np.float32),
                  "0.bias": np.arange(3, dtype=np.float64)},
        "step": 12345,
        "lr": 3e-4,
        "nan": float("nan"),
        "inf": -float("inf"),
        "name": "PPO ✓",
        "flags": [True, False, None],
        "shape": (84, 84, 4),
        "ints": {0: np.array([1, 2], dtype=np.int64), 7: "seven"},
        "dtypes": [np.arange(4, dtype=dt) for dt in
                   (np.uint8, np.int8, np.int16, np.uint16, np.int32, np.uint32, np.uint64, np.float16)],
        "mask": np.array([[True, False]]),
        "empty": np.zeros((0, 5), dtype=np.float32),
        "scalar_array": np.array(2.5, dtype=np.float32),
        "np_scalar": np.float32(1.25),
        "np_int": np.int64(-3),
        "np_f64": np.float64(0.1),
        "np_bool": np.bool_(True),
        "strided": np.arange(20.0).reshape(4, 5)[::2, ::-1],
        "big_endian": np.arange(3, dtype=">f8"),
        "tensor": rlgrad.tensor(np.ones(2, dtype=np.float32), requires_grad=True),
        "nested": [[{"a": []}], {}],
    }


def assert_same(a, b) -> None:
    if isinstance(a, rlgrad.Tensor):
        assert isinstance(b, rlgrad.Tensor) and b.requires_grad == a.requires_grad
        assert_same(a._value, b._value)
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and b.shape == a.shape
        assert b.dtype == a.dtype.newbyteorder("=")
        assert a.tobytes() == np.ascontiguousarray(b).astype(a.dtype).tobytes()  # bit-exact
    elif isinstance(a, np.generic):
        assert type(b) is type(a) and a.tobytes() == b.tobytes()
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, list | tuple):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, float) and np.isnan(a):
        assert isinstance(b, float) and np.isnan(b)
    else:
        assert type(a) is type(b) and a == b


def test_round_trip_is_bit_exact_with_types_preserved(tmp_path):
    obj = sample_checkpoint()
    path = tmp_path / "ckpt.safetensors"
    rlgrad.save(obj, path)
    back = rlgrad.load(path)
    assert_same(obj, back)
    assert isinstance(back, CheckpointDict) and back.source == (str(path), "")
    assert back["model"].source == (str(path), "model")
    back["model"]["0.weight"][0, 0] = 1.0  # loaded arrays are ordinary writeable arrays


def test_checkpoint_is_one_plain_safetensors_file(tmp_path):
    path = tmp_path / "ckpt"
    model = nn.MLP([2, 3, 1])
    rlgrad.save({"model": model.state_dict(), "step": 3}, path)
    assert os.listdir(tmp_path) == ["ckpt"]  # no temporary or side files left
    arrays = safetensors.numpy.load_file(str(path))  # any safetensors reader opens it
    np.testing.assert_array_equal(arrays["model.0.weight"], model[0].weight._value)
    with safetensors.safe_open(str(path), framework="np") as f:
        meta = f.metadata()
    assert meta["format"] == "rlgrad.checkpoint"
    json.loads(meta["tree"])  # the structure is plain JSON


def test_plain_safetensors_files_load_as_a_dict_of_arrays(tmp_path):
    path = str(tmp_path / "weights.safetensors")
    safetensors.numpy.save_file({"weight": np.ones((2, 2), dtype=np.float32)}, path)
    back = rlgrad.load(path)
    assert list(back) == ["weight"] and back["weight"].dtype == np.float32


def test_model_and_optimizer_round_trip(tmp_path):
    model = nn.MLP([4, 8, 2])
    opt = optim.Adam(model.parameters(), lr=1e-3)
    x, y = np.ones((5, 4), dtype=np.float32), np.zeros((5, 2), dtype=np.float32)
    for _ in range(3):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    path = tmp_path / "agent.ckpt"
    rlgrad.save({"model": model.state_dict(), "opt": opt.state_dict()}, path)
    ck = rlgrad.load(path)
    model2 = nn.MLP([4, 8, 2])
    model2.load_state_dict(ck["model"])
    opt2 = optim.Adam(model2.parameters())
    opt2.load_state_dict(ck["opt"])
    assert list(ck["opt"]["state"]) == [0, 1, 2, 3]  # integer keys survive
    assert ck["opt"]["param_groups"][0]["betas"] == (0.9, 0.999)  # so do tuples
    for m, o in ((model, opt), (model2, opt2)):
        loss = nn.functional.mse_loss(m(x), y)
        o.zero_grad()
        loss.backward()
        o.step()
    for a, b in zip(model.parameters(), model2.parameters()):
        np.testing.assert_array_equal(a._value, b._value)


def test_unsupported_values_are_refused_with_the_key(tmp_path):
    path = tmp_path / "x"
    with pytest.raises(TypeError, match="cannot save a set at key 'a.b'"):
        rlgrad.save({"a": {"b": {1, 2}}}, path)
    with pytest.raises(TypeError, match="save its state instead"):
        rlgrad.save({"model": nn.Linear(1, 1)}, path)
    with pytest.raises(TypeError, match="array at key 'x.1' has dtype <U1"):
        rlgrad.save({"x": [np.zeros(1), np.array(["a"])]}, path)
    with pytest.raises(TypeError, match="checkpoint keys must be str or int"):
        rlgrad.save({(1, 2): 3}, path)
    with pytest.raises(TypeError, match="object"):
        rlgrad.save(np.array([None]), path)
    assert not path.exists()


def test_truncated_checkpoint_names_file_and_key(tmp_path):
    path = tmp_path / "run.ckpt"
    rlgrad.save({"model": {"w": np.ones(1000, dtype=np.float32)}, "step": 1}, path)
    data = path.read_bytes()
    path.write_bytes(data[:-100])
    with pytest.raises(CheckpointError) as e:
        rlgrad.load(path)
    assert str(e.value).startswith(f"checkpoint '{path}' is truncated: the array at key 'model.w'")
    path.write_bytes(data[:30])
    with pytest.raises(CheckpointError, match=f"checkpoint '{path}' is truncated or not a checkpoint"):
        rlgrad.load(path)
    path.write_bytes(b"")
    with pytest.raises(CheckpointError, match="truncated or empty"):
        rlgrad.load(path)


def test_corrupted_bytes_are_caught_by_the_checksum(tmp_path):
    path = tmp_path / "run.ckpt"
    rlgrad.save({"a": np.zeros(10, dtype=np.float32), "b": np.ones(10)}, path)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF  # inside the last array's bytes
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"is corrupt: the array at key '(a|b)' fails its checksum"):
        rlgrad.load(path)


def test_corrupted_header_and_non_checkpoints(tmp_path):
    path = tmp_path / "run.ckpt"
    rlgrad.save({"a": np.zeros(3)}, path)
    data = bytearray(path.read_bytes())
    data[8] = ord("#")  # break the JSON header
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="its header is not valid JSON"):
        rlgrad.load(path)
    path.write_text("import os; os.system('echo pwned')\n" * 3)  # a text file is no checkpoint
    with pytest.raises(CheckpointError, match=f"checkpoint '{path}'"):
        rlgrad.load(path)
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        rlgrad.load(tmp_path / "missing.ckpt")


def test_a_crash_while_writing_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    path = tmp_path / "ckpt"
    rlgrad.save({"step": 1, "w": np.zeros(100)}, path)
    before = path.read_bytes()
    real_save_file = safetensors.numpy.save_file

    def crash_midway(tensors, filename, metadata=None):
        real_save_file(tensors, filename, metadata=metadata)
        with open(filename, "r+b") as f:  # half the bytes are written, then the process "dies"
            f.truncate(os.path.getsize(filename) // 2)
        raise OSError("No space left on device")

    monkeypatch.setattr(safetensors.numpy, "save_file", crash_midway)
    with pytest.raises(OSError, match="No space left"):
        rlgrad.save({"step": 2, "w": np.ones(100)}, path)
    assert path.read_bytes() == before
    assert rlgrad.load(path)["step"] == 1
    assert os.listdir(tmp_path) == ["ckpt"]  # the temporary file was removed


def test_a_crash_before_the_rename_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    path = tmp_path / "ckpt"
    rlgrad.save({"step": 1}, path)

    def no_rename(src, dst):
        raise KeyboardInterrupt  # e.g. Ctrl-C exactly between fsync and rename

    monkeypatch.setattr(serialization.os, "replace", no_rename)
    with pytest.raises(KeyboardInterrupt):
        rlgrad.save({"step": 2}, path)
    monkeypatch.undo()
    assert rlgrad.load(path)["step"] == 1
    assert os.listdir(tmp_path) == ["ckpt"]


def test_save_fsyncs_the_file_and_the_folder(tmp_path, monkeypatch):
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}") if os.path.exists("/proc/self/fd") else "?")
        real_fsync(fd)

    monkeypatch.setattr(serialization.os, "fsync", spy)
    path = tmp_path / "ckpt"
    rlgrad.save({"a": 1}, path)
    assert len(synced) == 2
    if synced[0] != "?":
        assert synced[0].startswith(str(tmp_path / ".ckpt.")) and synced[1] == str(tmp_path)


def test_overwrite_keeps_file_permissions(tmp_path):
    path = tmp_path / "ckpt"
    rlgrad.save({"a": 1}, path)
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)
    os.chmod(path, 0o600)
    rlgrad.save({"a": 2}, path)
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)


def test_loading_never_unpickles(tmp_path, monkeypatch):
    import pickle

    def forbidden(*a, **k):
        raise AssertionError("pickle used")

    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(np, "load", forbidden)
    path = tmp_path / "ckpt"
    rlgrad.save(sample_checkpoint(), path)
    rlgrad.load(path)


# ---- hostile headers: every one a CheckpointError with one line, never a raw Python error ------
def _with_header(path, header: dict | bytes, data: bytes = b"") -> None:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data)


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


def _one_line_checkpoint_error(path) -> str:
    with pytest.raises(CheckpointError) as e:
        rlgrad.load(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg
    return msg


@pytest.mark.parametrize("offsets", [["0", "4"], None, [None, None], [0], [4, 0], [-4, 0],
                                     [0.5, 4], [True, 4], "04", {"a": 1}])
def test_malformed_data_offsets_are_a_checkpoint_error(tmp_path, offsets):
    path = tmp_path / "bad.ckpt"
    _with_header(path, {"a": {"dtype": "F32", "shape": [1], "data_offsets": offsets}}, b"\0" * 4)
    assert "key 'a'" in _one_line_checkpoint_error(path)


@pytest.mark.parametrize("entry", [None, 3, "x", [], {"dtype": 3, "shape": [1], "data_offsets": [0, 4]},
                                   {"dtype": "F32", "shape": "1", "data_offsets": [0, 4]},
                                   {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]},
                                   {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}])
def test_malformed_entries_are_a_checkpoint_error(tmp_path, entry):
    path = tmp_path / "bad.ckpt"
    _with_header(path, {"a": entry}, b"\0" * 4)
    _one_line_checkpoint_error(path)


@pytest.mark.parametrize("meta", [[], "x", {"format": "rlgrad.checkpoint", "format_version": "1",
                                            "tree": "[", "crc32": "{}"},
                                  {"format": "rlgrad.checkpoint", "format_version": "1",
                                   "tree": "{\"$dict\": 5}", "crc32": "{}"},
                                  {"format": "rlgrad.checkpoint", "format_version": "1",
                                   "tree": "{\"$array\": \"a\", \"shape\": \"x\"}",
                                   "crc32": "[]"},
                                  {"format": "rlgrad.checkpoint", "format_version": "1",
                                   "tree": "{\"$dict\": [[[1], 2]]}", "crc32": "{}"},
                                  {"format": "rlgrad.checkpoint", "format_version": "1",
                                   "tree": "{\"$tuple\": 7}", "crc32": "{}"}])
def test_malformed_metadata_is_a_checkpoint_error(tmp_path, meta):
    path = tmp_path / "bad.ckpt"
    _with_header(path, {"__metadata__": meta})
    _one_line_checkpoint_error(path)


def test_deeply_nested_header_is_a_checkpoint_error(tmp_path):
    path = tmp_path / "deep.ckpt"
    depth = 100_000
    _with_header(path, b"{\"a\":" + b"[" * depth + b"]" * depth + b"}")
    assert "nest" in _one_line_checkpoint_error(path)


def test_deeply_nested_tree_is_a_checkpoint_error_and_is_refused_when_saving(tmp_path):
    path = tmp_path / "deep.ckpt"
    rlgrad.save({"a": np.zeros(2)}, path)
    header = json.loads(path.read_bytes()[8:8 + int.from_bytes(path.read_bytes()[:8], "little")])
    data = path.read_bytes()[8 + int.from_bytes(path.read_bytes()[:8], "little"):]
    header["__metadata__"]["tree"] = "[" * 900 + "]" * 900  # valid JSON, valid file otherwise
    _with_header(path, header, data)
    assert "nest" in _one_line_checkpoint_error(path)
    deep: list = []
    for _ in range(900):
        deep = [deep]
    with pytest.raises(ValueError, match="nest"):
        rlgrad.save(deep, tmp_path / "deep2.ckpt")
    shallow: list = []
    for _ in range(serialization.MAX_DEPTH - 1):
        shallow = [shallow]
    rlgrad.save(shallow, tmp_path / "ok.ckpt")  # as deep as allowed: round-trips
    assert rlgrad.load(tmp_path / "ok.ckpt") == shallow


def test_a_directory_is_a_checkpoint_error(tmp_path):
    (tmp_path / "ckpt").mkdir()
    assert "directory" in _one_line_checkpoint_error(tmp_path / "ckpt")


def test_damaged_headers_never_raise_anything_but_checkpoint_error(tmp_path):
    """Every single-byte change of a real checkpoint's header: it loads the same or is refused.
    Before, "the same" was not checked: a change of a value (gamma 0.98 -> 0.99) loaded."""
    path = tmp_path / "c.ckpt"
    obj = {"model": {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, "step": 7, "t": (1, "x"),
           "gamma": 0.98}
    rlgrad.save(obj, path)
    good = path.read_bytes()
    n = 8 + int.from_bytes(good[:8], "little")
    rng = np.random.default_rng(0)
    loaded = 0
    for i in rng.choice(n, size=min(n, 300), replace=False):
        for new in (ord("0"), ord("\""), ord("["), ord("}"), ord("-"), ord("9"), 0xFF):
            bad = bytearray(good)
            bad[i] = new
            path.write_bytes(bytes(bad))
            try:
                got = rlgrad.load(path)
            except CheckpointError as e:
                assert "\n" not in str(e)
                continue
            assert_same(obj, got)  # loaded: then with exactly the values saved
            loaded += 1
    assert loaded > 0  # the bytes that were already what was written


def test_every_single_bit_flip_of_the_header_is_refused(tmp_path):
    """The issue's experiment: 400 random bit flips of a header, 31 loaded with changed values
    before (the CRCs covered the arrays only). Now each is refused by the whole-file checksum
    (or an earlier check), and an old checkpoint without that checksum still loads."""
    path = tmp_path / "c.ckpt"
    obj = {"hp": {"gamma": 0.98, "lr": 3e-4}, "n": 12, "w": np.arange(5, dtype=np.float32)}
    rlgrad.save(obj, path)
    good = path.read_bytes()
    n = 8 + int.from_bytes(good[:8], "little")
    rng = np.random.default_rng(1)
    for _ in range(400):
        bad = bytearray(good)
        bad[rng.integers(0, n)] ^= 1 << int(rng.integers(0, 8))
        path.write_bytes(bytes(bad))
        with pytest.raises(CheckpointError) as e:
            rlgrad.load(path)
        assert "\n" not in str(e.value)
    i = good.index(b"0.98")
    path.write_bytes(good[:i] + b"0.99" + good[i + 4:])
    assert "whole-file checksum" in _one_line_checkpoint_error(path)
    header = json.loads(good[8:n])
    assert len(header["__metadata__"].pop("file_crc32")) == 8
    _with_header(path, header, good[n:])  # as an rlgrad before the whole-file checksum wrote it
    assert_same(obj, rlgrad.load(path))
    bad = bytearray(good)
    bad[-1] ^= 1  # in the arrays: the array's own checksum names it
    path.write_bytes(bytes(bad))
    assert "the array at key 'w' fails its checksum" in _one_line_checkpoint_error(path)


def test_a_five_thousand_digit_integer_in_a_header_is_a_checkpoint_error(tmp_path):
    """Before: a ValueError (Python's limit on converting long integers) escaped."""
    path = tmp_path / "c.ckpt"
    rlgrad.save({"n": 7}, path)
    good = path.read_bytes()
    n = 8 + int.from_bytes(good[:8], "little")
    header = json.loads(good[8:n])
    header["__metadata__"].pop("file_crc32")
    header["__metadata__"]["tree"] = header["__metadata__"]["tree"].replace("7", "9" * 5000)
    _with_header(path, header, good[n:])
    assert "not valid JSON" in _one_line_checkpoint_error(path)
    _with_header(path, b'{"a":{"dtype":"F32","shape":[' + b"9" * 5000 + b'],"data_offsets":[0,4]}}')
    assert "not valid JSON" in _one_line_checkpoint_error(path)


def test_damaged_structure_records_never_raise_anything_but_checkpoint_error(tmp_path):
    """A valid file whose structure record has one node replaced by a wrong value: loads or is
    refused with a CheckpointError (before: TypeError, ValueError from NumPy or the Tensor)."""
    import random

    path = tmp_path / "c.ckpt"
    obj = {"model": {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "i": np.arange(3)},
           "t": (1, "x"), "s": np.float32(2), "T": rlgrad.tensor(np.ones(2, dtype=np.float32))}
    rlgrad.save(obj, path)
    good = path.read_bytes()
    n = 8 + int.from_bytes(good[:8], "little")
    header = json.loads(good[8:n])
    tree = json.loads(header["__metadata__"]["tree"])
    wrong = [None, -1, "x", [1, 2], {}, {"$dict": 3}, {"$tuple": {}}, True,
             {"$tensor": "model.i", "requires_grad": True}, {"$scalar": "model.w"},
             {"$array": "model.w", "shape": [7]}, {"$array": "model.w", "shape": [[1]]},
             {"$tensor": "model.w", "shape": "ab"}]

    def places(t, path=()):
        yield path
        items = t.items() if isinstance(t, dict) else enumerate(t) if isinstance(t, list) else ()
        for k, v in items:
            yield from places(v, (*path, k))

    rng = random.Random(0)
    spots = list(places(tree))
    refused = 0
    for _ in range(400):
        t = json.loads(json.dumps(tree))
        where, value = rng.choice(spots), rng.choice(wrong)
        if not where:
            t = value
        else:
            node = t
            for k in where[:-1]:
                node = node[k]
            node[where[-1]] = value
        header["__metadata__"]["tree"] = json.dumps(t)
        _with_header(path, header, good[n:])
        try:
            rlgrad.load(path)
        except CheckpointError as e:
            assert "\n" not in str(e)
            refused += 1
    assert refused > 100


def test_a_dtype_changed_in_the_header_is_caught(tmp_path):
    """The CRC covers an array's bytes, not the header's dtype: F32 read as I32 has the same
    bytes. The structure record keeps the dtype too (before: loaded silently as int32)."""
    path = tmp_path / "c.ckpt"
    rlgrad.save({"w": np.linspace(0, 1, 4, dtype=np.float32), "s": np.float32(2.5)}, path)
    data = path.read_bytes()
    assert "whole-file checksum" in str(pytest.raises(CheckpointError, rlgrad.load, _write(
        path, data.replace(b'"dtype":"F32","shape":[4]', b'"dtype":"I32","shape":[4]'))).value)
    n = 8 + int.from_bytes(data[:8], "little")  # the record's own check, as in a file without
    header = json.loads(data[8:n])              # the whole-file checksum (an older rlgrad's)
    header["__metadata__"].pop("file_crc32")
    _with_header(path, header, data[n:])
    data = path.read_bytes()
    for old, new in ((b'"dtype": "F32", "shape": [4]', b'"dtype": "I32", "shape": [4]'),
                     (b'"dtype": "F32", "shape": [1]', b'"dtype": "U32", "shape": [1]')):
        assert data.count(old) == 1
        path.write_bytes(data.replace(old, new))
        with pytest.raises(CheckpointError, match="has dtype u?int32 in the header, its record "
                                                  "says 'float32'"):
            rlgrad.load(path)
    header = json.loads(data[8:8 + int.from_bytes(data[:8], "little")])
    tree = header["__metadata__"]["tree"]
    old_style = json.loads(tree)  # a checkpoint of an rlgrad that did not record dtypes
    for _, node in old_style["$dict"]:
        node.pop("dtype")
    header["__metadata__"]["tree"] = json.dumps(old_style)
    _with_header(path, header, data[8 + int.from_bytes(data[:8], "little"):])
    got = rlgrad.load(path)
    assert got["w"].dtype == np.float32 and got["s"] == np.float32(2.5)


def test_a_checkpoint_renamed_over_during_the_read_loads_the_new_one(tmp_path, monkeypatch):
    """A run being trained renames its new checkpoint over the old one; a reader that opened
    the old file's header and then checksums the path's new file must read again, not call a
    whole checkpoint corrupt (`rlgrad resume`/`eval` beside a live trainer saw that)."""
    import rlgrad.serialization as ser

    path, newer = tmp_path / "checkpoint.safetensors", tmp_path / "newer.safetensors"
    rlgrad.save({"step": 1, "w": np.arange(4.0)}, path)
    rlgrad.save({"step": 2, "w": np.arange(400.0)}, newer)
    real = ser._read_header
    calls = []

    def read_then_rotate(p: str):
        out = real(p)
        if not calls:
            os.replace(newer, path)  # the trainer's rename, between our opens
        calls.append(p)
        return out

    monkeypatch.setattr(ser, "_read_header", read_then_rotate)
    got = rlgrad.load(path)
    assert got["step"] == 2 and np.array_equal(got["w"], np.arange(400.0)) and len(calls) == 2
    # a file damaged in place (same file, no rename) is still refused at once
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    calls.append("done")  # no more rotations
    with pytest.raises(ser.CheckpointError, match="corrupt"):
        rlgrad.load(path)
