#!/usr/bin/env bash
# Builds every example function of `shoal serve` into OUT (default
# build/functions): OUT/NAME, the shoal image (`shoal cc`), and
# OUT/NAME.native, the native static build (`musl-gcc -static`) from the
# same source, for the process, runc and runsc backends; and OUT/fs/data.bin
# (50 MiB) for static and fileread (deploy them with "fs": "OUT/fs");
# and the Lua function runtime OUT/lua (+ OUT/lua.native) from the `lua-fn`
# recipe (Debian's Lua 5.4 source), with the example handler in OUT/lua-fs
# (deploy it with "fs": "OUT/lua-fs"; any directory holding a handler.lua
# will do); and the Go functions OUT/go-NAME (below); and the Node.js and
# Python handlers of the function runtimes, OUT/node/NAME.js and
# OUT/python/NAME.py (`shoal fn deploy NAME --runtime node OUT/node/NAME.js`).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
OUT="${1:-$here/../../build/functions}"
SHOAL="${SHOAL:-$here/../../target/release/shoal}"
mkdir -p "$OUT/fs"
# Absolute: the Go builds below run in another directory.
OUT="$(cd "$OUT" && pwd)"
for f in noop twowrite fib matmul alloc static fileread sleep crash tmpl; do
    "$SHOAL" cc -O2 -o "$OUT/$f" "$here/$f.c" "$here/fn_http.c" -lpthread
    musl-gcc -static -O2 -o "$OUT/$f.native" "$here/$f.c" "$here/fn_http.c" -lpthread
done
# serial: one connection at a time, its own minimal server (no fn_http).
"$SHOAL" cc -O2 -o "$OUT/serial" "$here/serial.c"
musl-gcc -static -O2 -o "$OUT/serial.native" "$here/serial.c"
# The Go functions (apps/functions/go/, the paper's Go functions): one
# static executable each, OUT/go-NAME, which shoal runs unmodified and the
# process, runc and runsc backends run as it is (OUT/go-NAME.native is the
# same file). Go >= 1.22 from PATH or /usr/local/go; without it they are
# left out, and said so.
if GO="$(bash "$here/../../scripts/find-go")"; then
    for f in noop fib matmul alloc static fileread; do
        (cd "$here/go" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod "$GO" build -trimpath -o "$OUT/go-$f" "./$f")
        ln -f "$OUT/go-$f" "$OUT/go-$f.native"
    done
else
    echo "build.sh: the Go functions are not built" >&2
fi
"$SHOAL" recipe build lua-fn -o "$OUT/lua" --native "$OUT/lua.native"
mkdir -p "$OUT/lua-fs"
cp "$here/lua/handler.lua" "$OUT/lua-fs/handler.lua"
mkdir -p "$OUT/node" "$OUT/python"
cp "$here"/node/*.js "$OUT/node/"
cp "$here"/python/*.py "$OUT/python/"
[ -s "$OUT/fs/data.bin" ] || head -c $((50 << 20)) /dev/urandom > "$OUT/fs/data.bin"
echo "functions built in $OUT"
