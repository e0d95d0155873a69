#!/usr/bin/python3
"""Independent reference forward pass of a llama-architecture GGUF file.

Its own GGUF reader and a plain NumPy (float64) llama forward pass, sharing
no code with the Go package: the Go test runs it and compares logits and
greedy tokens. Usage:

    numpy_forward.py MODEL.gguf STEPS TOKEN_ID...

prints JSON {"logits": [[...], ...], "tokens": [...]}: the logits of the
last position for the prompt and after each of STEPS greedy tokens (the
whole sequence recomputed every step, no cache), and the greedy tokens.
"""
import json
import struct
import sys

import numpy as np

SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class Reader:
    def __init__(self, data):
        self.data, self.off = data, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.data, self.off)[0]
        self.off += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.data[self.off:self.off + n].decode("utf-8")
        self.off += n
        return s

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take("<I"), self.take("<Q")
            return [self.value(et) for _ in range(n)]
        return self.take(SCALAR[t])


def read_gguf(path):
    data = open(path, "rb").read()
    r = Reader(data)
    assert data[:4] == b"GGUF", "bad magic"
    r.off = 4
    version, nt, nkv = r.take("<I"), r.take("<Q"), r.take("<Q")
    assert version == 3
    kv = {}
    for _ in range(nkv):
        k = r.string()
        kv[k] = r.value(r.take("<I"))
    infos = []
    for _ in range(nt):
        name = r.string()
        dims = [r.take("<Q") for _ in range(r.take("<I"))]
        infos.append((name, dims, r.take("<I"), r.take("<Q")))
    align = kv.get("general.alignment", 32)
    base = (r.off + align - 1) // align * align
    tensors = {}
    for name, dims, typ, off in infos:
        n = int(np.prod(dims))
        start = base + off
        if typ == 0:
            a = np.frombuffer(data, "<f4", n, start).astype(np.float64)
        elif typ == 1:
            a = np.frombuffer(data, "<f2", n, start).astype(np.float64)
        elif typ == 8:  # Q8_0: blocks of an f16 scale and 32 int8
            blocks = np.frombuffer(data, np.uint8, n // 32 * 34, start).reshape(-1, 34)
            d = blocks[:, :2].copy().view("<f2").astype(np.float64)
            q = blocks[:, 2:].copy().view(np.int8).astype(np.float64)
            a = (d * q).reshape(-1)
        else:
            raise SystemExit("unsupported tensor type %d" % typ)
        # GGUF dims are fastest-first; NumPy shapes are slowest-first.
        tensors[name] = a.reshape(list(reversed(dims)))
    return kv, tensors


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, theta):
    # x: [T, heads, hd]; rotate adjacent pairs by pos * theta^(-2i/hd)
    t, _, hd = x.shape
    inv = theta ** (-np.arange(0, hd, 2) / hd)
    ang = np.arange(t)[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


def forward(kv, w, tokens):
    L = kv["llama.block_count"]
    heads = kv["llama.attention.head_count"]
    kvh = kv.get("llama.attention.head_count_kv", heads)
    eps = kv.get("llama.attention.layer_norm_rms_epsilon", 1e-5)
    theta = kv.get("llama.rope.freq_base", 10000.0)
    x = w["token_embd.weight"][tokens]
    T, D = x.shape
    hd = D // heads
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(L):
        p = "blk.%d." % l
        h = rmsnorm(x, w[p + "attn_norm.weight"], eps)
        q = rope((h @ w[p + "attn_q.weight"].T).reshape(T, heads, hd), theta)
        k = rope((h @ w[p + "attn_k.weight"].T).reshape(T, kvh, hd), theta)
        v = (h @ w[p + "attn_v.weight"].T).reshape(T, kvh, hd)
        rep = heads // kvh
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        a = np.einsum("hts,shd->thd", s, v).reshape(T, D)
        x = x + a @ w[p + "attn_output.weight"].T
        h = rmsnorm(x, w[p + "ffn_norm.weight"], eps)
        g = h @ w[p + "ffn_gate.weight"].T
        u = h @ w[p + "ffn_up.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ w[p + "ffn_down.weight"].T
    out = w.get("output.weight", w["token_embd.weight"])
    return rmsnorm(x[-1], w["output_norm.weight"], eps) @ out.T


def main():
    path, steps, tokens = sys.argv[1], int(sys.argv[2]), [int(t) for t in sys.argv[3:]]
    kv, w = read_gguf(path)
    assert kv["general.architecture"] == "llama"
    logits, greedy = [], []
    for _ in range(steps + 1):
        lg = forward(kv, w, tokens)
        logits.append([float(v) for v in lg])
        nxt = int(np.argmax(lg))
        greedy.append(nxt)
        tokens = tokens + [nxt]
    json.dump({"logits": logits, "tokens": greedy[:steps]}, sys.stdout)


if __name__ == "__main__":
    main()
