#!/usr/bin/env python3
"""batchd_worker: serve a Python batch function as a batchd worker process.

Standard library only; one file: copy it beside your model.

    # model.py
    import batchd_worker

    def batch(inputs):            # inputs: list[bytes], 1 to batch_max of them
        return [x.upper() for x in inputs]   # one bytes (or Exception) per input

    if __name__ == "__main__":
        batchd_worker.serve(batch)

or, with no call in model.py:  python3 batchd_worker.py model.py

batchd starts the worker (devices.worker.cmd in its config), sends it batches
over stdin and reads the results on stdout, in the frames PROTOCOL.md
describes. What `batch` returns decides each item:

  * bytes (or bytearray, memoryview; a str is sent as UTF-8): the output;
  * an Exception instance: that item fails, with its message; the others
    are answered;
  * an exception raised by `batch`: the whole batch fails (batchd splits it
    to find a poison input); the worker goes on serving.

Load your model before calling serve(): batchd counts the worker ready when
it answers the handshake, which serve() does first. Anything the model prints
goes to stderr, which batchd logs line by line under the device's name:
serve() moves stdout (file descriptor 1) to stderr, since the protocol owns
the real stdout. The device's index is in $BATCHD_DEVICE_INDEX (and
hello().device_index).
"""

import importlib.util
import os
import struct
import sys
import traceback

PROTOCOL_VERSION = 1
MAGIC = b"batchd-worker"

MSG_HELLO = 1
MSG_HELLO_ACK = 2
MSG_BATCH = 3
MSG_RESULT = 4
MSG_BATCH_ERROR = 5

ITEM_OK = 0
ITEM_ERROR = 1

# An error message sent to batchd is cut at this many bytes.
ERROR_MAX = 4096

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


class ProtocolError(Exception):
    """batchd sent what the protocol does not allow."""


class Hello:
    """The handshake batchd opens with."""

    def __init__(self, version_min, version_max, device_index, device_name, batch_max, frame_max):
        self.version_min = version_min
        self.version_max = version_max
        self.device_index = device_index
        self.device_name = device_name
        self.batch_max = batch_max
        self.frame_max = frame_max


class _Reader:
    """Reads a payload's fields."""

    def __init__(self, data):
        self.data = data
        self.at = 0

    def take(self, n, what):
        if n > len(self.data) - self.at:
            raise ProtocolError("message ends inside its " + what)
        b = self.data[self.at:self.at + n]
        self.at += n
        return b

    def u32(self, what):
        return _U32.unpack(self.take(4, what))[0]

    def u64(self, what):
        return _U64.unpack(self.take(8, what))[0]

    def bytes(self, what):
        return bytes(self.take(self.u32(what + " length"), what))

    def done(self, what):
        if self.at != len(self.data):
            raise ProtocolError("%s: %d bytes past its end" % (what, len(self.data) - self.at))


def _read_exact(f, n):
    """n bytes from f, or None at a clean end of file before the first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = f.read(n - len(buf))
        if not chunk:
            if not buf:
                return None
            raise ProtocolError("end of file inside a frame")
        buf += chunk
    return bytes(buf)


def read_frame(f, frame_max):
    """(type, payload) of the next frame, or None when batchd closed stdin."""
    hdr = _read_exact(f, 4)
    if hdr is None:
        return None
    n = _U32.unpack(hdr)[0]
    if n < 1 or n > frame_max:
        raise ProtocolError("frame of %d bytes: want 1 to %d" % (n, frame_max))
    body = _read_exact(f, n)
    if body is None:
        raise ProtocolError("end of file inside a frame")
    return body[0], memoryview(body)[1:]


def write_frame(f, typ, parts):
    """Writes one frame of type typ whose payload is the bytes in parts."""
    n = 1 + sum(len(p) for p in parts)
    f.write(_U32.pack(n) + bytes((typ,)) + b"".join(parts))
    f.flush()


def _blob(b):
    return _U32.pack(len(b)) + b


def _error_text(e):
    msg = "%s: %s" % (type(e).__name__, e) if str(e) else type(e).__name__
    return msg.encode("utf-8", "replace")[:ERROR_MAX]


def _encode_item(x, i):
    """(status, data) of one element of what batch returned."""
    if isinstance(x, BaseException):
        return ITEM_ERROR, _error_text(x)
    if isinstance(x, (bytes, bytearray, memoryview)):
        return ITEM_OK, bytes(x)
    if isinstance(x, str):
        return ITEM_OK, x.encode("utf-8")
    return ITEM_ERROR, ("batch returned %s for item %d: want bytes or an Exception" % (type(x).__name__, i)).encode()


def _take_stdio():
    """The protocol's own stdin and stdout; fds 0 and 1 become /dev/null and
    stderr, so that prints (Python's or a C library's) cannot corrupt the
    frames. What the model printed before and Python still buffers goes to
    stderr too (flushed after the move)."""
    proto_in = os.fdopen(os.dup(0), "rb", buffering=1 << 16)
    proto_out = os.fdopen(os.dup(1), "wb", buffering=1 << 16)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdout.flush()
    return proto_in, proto_out


def handshake(rd, wr, info=""):
    """Answers batchd's hello; returns it."""
    fr = read_frame(rd, 1 << 20)
    if fr is None:
        raise ProtocolError("stdin closed before the hello")
    typ, payload = fr
    if typ != MSG_HELLO:
        raise ProtocolError("message type %d where the hello was due" % typ)
    r = _Reader(payload)
    if r.bytes("magic") != MAGIC:
        raise ProtocolError("hello: not batchd's magic")
    h = Hello(r.u32("version_min"), r.u32("version_max"), r.u32("device_index"),
              r.bytes("device_name").decode("utf-8", "replace"), r.u32("batch_max"), r.u32("frame_max"))
    r.done("hello")
    if not h.version_min <= PROTOCOL_VERSION <= h.version_max:
        raise ProtocolError("batchd speaks protocol versions %d to %d; this helper speaks %d"
                            % (h.version_min, h.version_max, PROTOCOL_VERSION))
    write_frame(wr, MSG_HELLO_ACK, [_blob(MAGIC), _U32.pack(PROTOCOL_VERSION),
                                    _blob(info.encode("utf-8", "replace")[:1024])])
    return h


_stdio = None


def serve(batch, info=None):
    """Serves batch(inputs: list[bytes]) -> list[bytes | Exception] until
    batchd closes stdin; then returns. A protocol error exits with status 2."""
    global _stdio
    if _stdio is None:
        _stdio = _take_stdio()
    rd, wr = _stdio
    if info is None:
        info = "python %d.%d batchd_worker" % sys.version_info[:2]
    try:
        h = handshake(rd, wr, info)
        while True:
            fr = read_frame(rd, h.frame_max)
            if fr is None:
                return
            typ, payload = fr
            if typ != MSG_BATCH:
                raise ProtocolError("message type %d where a batch was due" % typ)
            r = _Reader(payload)
            bid = r.u64("batch id")
            r.bytes("model")
            r.bytes("version")
            n = r.u32("count")
            inputs = [r.bytes("input") for _ in range(n)]
            r.done("batch")
            try:
                outs = list(batch(inputs))
                if len(outs) != n:
                    raise ValueError("batch returned %d outputs for %d inputs" % (len(outs), n))
            except Exception as e:  # the whole batch fails; the worker does not
                traceback.print_exc(file=sys.stderr)
                write_frame(wr, MSG_BATCH_ERROR, [_U64.pack(bid), _blob(_error_text(e))])
                continue
            parts = [_U64.pack(bid), _U32.pack(n)]
            for i, x in enumerate(outs):
                st, data = _encode_item(x, i)
                parts.append(bytes((st,)))
                parts.append(_blob(data))
            write_frame(wr, MSG_RESULT, parts)
    except ProtocolError as e:
        print("batchd_worker: protocol error: %s" % e, file=sys.stderr)
        sys.exit(2)
    except BrokenPipeError:
        return  # batchd went away


def _load(path):
    """The module at path, imported as batchd_model, its directory on sys.path."""
    path = os.path.abspath(path)
    sys.path.insert(0, os.path.dirname(path))
    spec = importlib.util.spec_from_file_location("batchd_model", path)
    if spec is None or spec.loader is None:
        raise SystemExit("batchd_worker: cannot load %s" % path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["batchd_model"] = mod
    spec.loader.exec_module(mod)
    return mod


def main(argv):
    if len(argv) != 2 or argv[1].startswith("-"):
        print("usage: batchd_worker.py MODEL.py   (MODEL.py defines batch(inputs) -> outputs)", file=sys.stderr)
        return 2
    global _stdio
    _stdio = _take_stdio()  # before the model's import, which may print
    mod = _load(argv[1])
    fn = getattr(mod, "batch", None)
    if not callable(fn):
        print("batchd_worker: %s defines no function batch(inputs)" % argv[1], file=sys.stderr)
        return 2
    serve(fn, getattr(mod, "INFO", None))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
