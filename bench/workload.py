"""Workloads (random file, tree) in tmpfs, their source hashes, and checking what arrived."""

import hashlib
import os

MIB = 1 << 20
GIB = 1 << 30


def _write_random(path, size):
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 16 * MIB)
            f.write(os.urandom(n))
            left -= n


def _text_block(seed=7, size=16 * MIB):
    """Seeded log-like text (compresses about 4:1 with zstd or zlib)."""
    import random
    rng = random.Random(seed)
    levels = ("INFO", "WARN", "DEBUG", "ERROR")
    lines, n = [], 0
    while n < size:
        line = (f"2026-11-22T{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d} "
                f"{rng.choice(levels)} transfer {rng.randrange(10**6)} moved block {rng.randrange(4096)} "
                f"of file {rng.randrange(97)} in {rng.randrange(99999)} us\n")
        lines.append(line)
        n += len(line)
    return "".join(lines).encode()[:size]


def _write_text(path, size):
    """`size` bytes of log-like text: one 16 MiB seeded block repeated. Every tool compresses in
    windows far smaller than the block (zlib 32 KiB, Sluice 256 KiB pieces), so the repetition
    helps none of them."""
    block = _text_block()
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, len(block))
            f.write(block[:n])
            left -= n


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


class Workload:
    """`src` is a file or a directory; a tool must deliver it as DST_DIR/<basename(src)>."""

    def __init__(self, name, src, manifest):
        self.name, self.src = name, src
        self.manifest = manifest                 # relative path -> (size, sha256)
        self.bytes = sum(s for s, _ in manifest.values())
        self.files = len(manifest)
        self.is_dir = os.path.isdir(src)

    @property
    def basename(self):
        return os.path.basename(self.src.rstrip("/"))

    def describe(self):
        if self.name == "file":
            kind = "text" if self.src.endswith(".txt") else "random"
            return f"one {kind} file of {self.bytes / MIB:.0f} MiB"
        return f"tree of {self.files} files, {self.bytes / MIB:.0f} MiB"

    def verify(self, dst_dir):
        """(ok, reason): every file present with the source's size and SHA-256, nothing extra."""
        root = os.path.join(dst_dir, self.basename)
        if not self.is_dir:
            got = {"": root} if os.path.isfile(root) else {}
        else:
            got = {}
            for d, _, fs in os.walk(root):
                for f in fs:
                    p = os.path.join(d, f)
                    got[os.path.relpath(p, root)] = p
        missing = [k for k in self.manifest if k not in got]
        if missing:
            return False, f"{len(missing)} of {self.files} files missing (e.g. '{missing[0] or self.basename}')"
        extra = [k for k in got if k not in self.manifest]
        for rel, (size, digest) in self.manifest.items():
            p = got[rel]
            if os.path.getsize(p) != size:
                return False, f"size mismatch on '{rel or self.basename}': {os.path.getsize(p)} != {size}"
            if sha256(p) != digest:
                return False, f"SHA-256 mismatch on '{rel or self.basename}'"
        if extra:
            return True, f"all files match; {len(extra)} extra files left beside them"
        return True, "all files match (SHA-256)"


def received_bytes(dst_dir):
    """Bytes present under dst_dir (temporary files included): progress of an unfinished run.
    Counts allocated blocks, not the length, so a preallocated or sparse file is not counted as
    received (a tool may also have written blocks it has not yet verified)."""
    total = 0
    for d, _, fs in os.walk(dst_dir):
        for f in fs:
            try:
                st = os.stat(os.path.join(d, f))
                total += min(st.st_size, st.st_blocks * 512)
            except OSError:
                pass
    return total


def make_file(root, size, content="random"):
    os.makedirs(root, exist_ok=True)
    name = f"text-{size // MIB}MiB.txt" if content == "text" else f"random-{size // MIB}MiB.bin"
    path = os.path.join(root, name)
    if not (os.path.isfile(path) and os.path.getsize(path) == size):
        (_write_text if content == "text" else _write_random)(path, size)
    return Workload("file", path, {"": (size, sha256(path))})


def make_tree(root, small=10000, small_size=4096, large=20, large_size=50 * MIB):
    path = os.path.join(root, f"tree-{small}x{small_size}-{large}x{large_size // MIB}MiB")
    manifest = {}
    fresh = not os.path.isdir(path)
    for i in range(small):
        rel = os.path.join(f"d{i // 100:03d}", f"s{i:05d}.dat")
        p = os.path.join(path, rel)
        if fresh:
            os.makedirs(os.path.dirname(p), exist_ok=True)
            _write_random(p, small_size)
        manifest[rel] = p
    for i in range(large):
        rel = os.path.join("large", f"l{i:02d}.bin")
        p = os.path.join(path, rel)
        if fresh:
            os.makedirs(os.path.dirname(p), exist_ok=True)
            _write_random(p, large_size)
        manifest[rel] = p
    manifest = {rel: (os.path.getsize(p), sha256(p)) for rel, p in manifest.items()}
    return Workload("tree", path, manifest)
