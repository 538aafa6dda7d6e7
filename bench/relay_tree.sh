#!/bin/bash
# Issue 28: a tree of 2,000 files and 2 GiB through two relays on loopback, verified with
# diff -r (one run). `BIN=target/release/sluice bench/relay_tree.sh`; needs about 6 GiB of /dev/shm.
set -e
trap 'for p in "${pids[@]}"; do kill $p 2>/dev/null; done; rm -rf "$W"' EXIT
BIN=${BIN:-target/release/sluice}
W=/dev/shm/tree2k.$$
pids=()
mkdir -p $W/tree $W/recv/root $W/r1/root $W/r2/root $W/client
python3 - "$W/tree" <<'PY'
import os, sys, random
root = sys.argv[1]; rnd = random.Random(2028)
total = 0
for i in range(1990):
    d = os.path.join(root, f"d{i % 20}", f"e{i % 7}")
    os.makedirs(d, exist_ok=True)
    n = rnd.randrange(0, 65536)
    with open(os.path.join(d, f"f{i}.bin"), "wb") as f: f.write(rnd.randbytes(n))
    total += n
left = 2 * 1024**3 - total
for i in range(10):
    n = left // 10 + (left % 10 if i == 9 else 0)
    with open(os.path.join(root, f"big{i}.bin"), "wb") as f:
        for _ in range(n // (1 << 24)): f.write(os.urandom(1 << 24))
        f.write(os.urandom(n % (1 << 24)))
print("tree bytes", sum(os.path.getsize(os.path.join(p, f)) for p, _, fs in os.walk(root) for f in fs),
      "files", sum(len(fs) for _, _, fs in os.walk(root)))
PY
TOKEN=tree2k-bench-token-0123456789
serve() { # name port [spool]
  echo "$TOKEN" > $W/$1/tokens; chmod 600 $W/$1/tokens
  extra=(); [ -n "$3" ] && extra=(--spool $W/$1/spool --spool-max 8GiB)
  $BIN serve --listen 127.0.0.1:$2 --root $W/$1/root --state-dir $W/$1/state --tokens $W/$1/tokens "${extra[@]}" > $W/$1/out 2> $W/$1/log &
  pids+=($!)
}
serve recv 7811; serve r1 7812 spool; serve r2 7813 spool
sleep 1
fp() { awk '{print $NF}' $W/$1/out | head -1; }
cat > $W/client/config.toml <<TOML
[relays.r1]
address = "127.0.0.1"
port = 7812
fingerprint = "$(fp r1)"
[relays.r2]
address = "127.0.0.1"
port = 7813
fingerprint = "$(fp r2)"
TOML
start=$(date +%s.%N)
SLUICE_CONFIG=$W/client/config.toml SLUICE_TOKEN=$TOKEN $BIN cp -r --relay r1,r2 --relay-wait --json \
  -P 7811 --fingerprint "$(fp recv)" --known-hosts $W/client/kh $W/tree 127.0.0.1: | tail -1
end=$(date +%s.%N)
echo "wall $(python3 -c "print(round($end-$start,2))") s"
diff -r $W/tree $W/recv/root/tree > /dev/null || { echo "tree: DIFFERS"; exit 1; }
echo "tree: identical"
echo "files at the receiver: $(find $W/recv/root/tree -type f | wc -l); spool blocks left: $(find $W/r1/spool $W/r2/spool -type f -name '*.blk' 2>/dev/null | wc -l)"
