#!/usr/bin/env bash
# Build shoal's libc: Debian's musl 1.2.3 with shoal's overlay, so that no
# `syscall` instruction is left (every system call is a call to
# __shoal_syscall, provided by the shoal kernel).  See libc/README.md.
#
# Usage: libc/build-musl.sh        (env SHOAL_CACHE, default ~/.cache/shoal)
# Output: $SHOAL_CACHE/sysroot/{include,lib}
# Idempotent: when $SHOAL_CACHE/sysroot/.shoal-stamp matches the inputs
# (this script, the overlay, the musl source package, the compiler) it only
# says so and exits.
set -euo pipefail

MUSL_VERSION=1.2.3
# -fPIE: like everything shoal compiles (crates/shoal-toolchain/src/cc.rs),
# so that link-time ASLR layouts can move libc and keep its pages shared.
MUSL_CFLAGS="-O2 -ffunction-sections -fdata-sections -fPIE"

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OVERLAY="$HERE/overlay"
SHOAL_CACHE=${SHOAL_CACHE:-$HOME/.cache/shoal}
SRC_DIR="$SHOAL_CACHE/src"
BUILD_DIR="$SHOAL_CACHE/build/musl-$MUSL_VERSION"
SYSROOT="$SHOAL_CACHE/sysroot"
STAMP="$SYSROOT/.shoal-stamp"
LOG_DIR="$SHOAL_CACHE/logs"
LOG="$LOG_DIR/build-musl.log"

step() { echo "build-musl: $*"; }
die() {
    echo "build-musl: ERROR: $*" >&2
    exit 1
}
# run [-C DIR] MSG CMD...: run CMD (in DIR) with its output appended to the
# log; die with MSG on failure.
run() {
    local dir=.
    if [[ $1 == -C ]]; then dir=$2; shift 2; fi
    local msg=$1; shift
    echo "+ (cd $dir && $*)" >>"$LOG"
    if ! (cd "$dir" && exec "$@") >>"$LOG" 2>&1; then
        tail -n 15 "$LOG" | sed 's/^/build-musl:   | /' >&2
        die "$msg (log: $LOG)"
    fi
}
trap 'die "unexpected failure at line $LINENO (log: $LOG)"' ERR

mkdir -p "$SHOAL_CACHE" "$LOG_DIR" "$SRC_DIR"

# One build at a time per cache (CI and developers may share a machine).
exec 9>"$SHOAL_CACHE/.build-musl.lock"
flock 9
: >"$LOG"

# Source tree of the fetched package, if any (musl-1.2.3/ from apt-get source).
src_tree() { echo "$SRC_DIR/musl-$MUSL_VERSION"; }
src_dsc() { { ls "$SRC_DIR"/musl_"$MUSL_VERSION"-*.dsc 2>/dev/null || true; } | sort | tail -n 1; }

# Hash of everything the output depends on.
input_hash() {
    local dsc
    dsc=$(src_dsc)
    {
        echo "cflags=$MUSL_CFLAGS"
        echo "cc=$(gcc -dumpfullversion 2>/dev/null) $(gcc -dumpmachine 2>/dev/null)"
        sha256sum "$HERE/build-musl.sh" | cut -d' ' -f1
        if [[ -n "$dsc" ]]; then sha256sum "$dsc" | cut -d' ' -f1; else echo "no-source"; fi
        (cd "$OVERLAY" && find . -type f | LC_ALL=C sort | xargs -r sha256sum)
    } | sha256sum | cut -d' ' -f1
}

# ---------------------------------------------------------------- 0. up to date?
if [[ -f "$STAMP" && -f "$SYSROOT/lib/libc.a" && -n "$(src_dsc)" \
      && "$(cat "$STAMP")" == "$(input_hash)" ]]; then
    # Inputs newer than libc.a only by their time stamps (a fresh clone):
    # mark the sysroot current, so that shoal's quick time-stamp check
    # (shoal-toolchain's ensure_libc) does not run this script, and print
    # this line, on every later command.
    touch "$SYSROOT/lib/libc.a"
    step "sysroot up to date: $SYSROOT"
    exit 0
fi

[[ -d "$OVERLAY" ]] || die "overlay directory missing: $OVERLAY"

# ---------------------------------------------------------------- 1. deb-src
has_deb_src() {
    grep -Eqs '^[[:space:]]*Types:.*\bdeb-src\b' /etc/apt/sources.list.d/*.sources \
        || grep -Eqs '^[[:space:]]*deb-src[[:space:]]' /etc/apt/sources.list /etc/apt/sources.list.d/*.list
}
if [[ -z "$(src_dsc)" || ! -d "$(src_tree)" ]]; then
    if has_deb_src; then
        step "apt: deb-src entry already configured"
    else
        # Mirror every Debian "deb" stanza of the deb822 files (or deb line of
        # one-line .list files) as deb-src.
        new=/etc/apt/sources.list.d/shoal-src.sources
        : >"$new.tmp" || die "cannot write $new (need root)"
        for f in /etc/apt/sources.list.d/*.sources; do
            [[ -f "$f" && "$f" != "$new" ]] || continue
            awk 'BEGIN { RS = ""; ORS = "\n\n" }
                 /(^|\n)Types:[^\n]*(^|[ \t])deb([ \t]|\n|$)/ && /URIs:[^\n]*debian/ {
                     out = ""
                     n = split($0, L, "\n")
                     for (i = 1; i <= n; i++) {
                         if (L[i] ~ /^#/) continue
                         if (L[i] ~ /^Types:/) L[i] = "Types: deb-src"
                         out = out L[i] "\n"
                     }
                     printf "%s\n", out
                 }' "$f" >>"$new.tmp"
        done
        if [[ ! -s "$new.tmp" ]]; then
            # one-line format
            for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
                [[ -f "$f" ]] || continue
                sed -nE 's/^[[:space:]]*deb[[:space:]]+(.*debian.*)$/deb-src \1/p' "$f"
            done >"${new%.sources}.list.tmp"
            rm -f "$new.tmp"
            [[ -s "${new%.sources}.list.tmp" ]] || die "no Debian 'deb' entry found to mirror as deb-src"
            mv "${new%.sources}.list.tmp" "${new%.sources}.list"
            new=${new%.sources}.list
        else
            mv "$new.tmp" "$new"
        fi
        step "apt: added deb-src entries in $new; apt-get update"
        run "apt-get update failed" apt-get update
    fi

    # ------------------------------------------------------------ 2. dpkg-dev
    if dpkg-query -W -f='${Status}' dpkg-dev 2>/dev/null | grep -q "install ok installed"; then
        step "dpkg-dev: installed"
    else
        step "dpkg-dev: installing"
        if ! (env DEBIAN_FRONTEND=noninteractive apt-get install -y dpkg-dev) >>"$LOG" 2>&1; then
            # stale or missing package lists: update once and retry
            run "apt-get update failed" apt-get update
            run "apt-get install dpkg-dev failed" env DEBIAN_FRONTEND=noninteractive apt-get install -y dpkg-dev
        fi
    fi

    # ------------------------------------------------------------ 3. fetch
    step "fetch: apt-get source musl ($MUSL_VERSION) into $SRC_DIR"
    rm -rf "$(src_tree)"
    if ! (cd "$SRC_DIR" && apt-get source --download-only musl) >>"$LOG" 2>&1; then
        # deb-src configured but its Sources index never fetched: update once
        run "apt-get update failed" apt-get update
        run -C "$SRC_DIR" "apt-get source --download-only musl failed" \
            apt-get source --download-only musl
    fi
    dsc=$(src_dsc)
    [[ -n "$dsc" ]] || die "apt-get source did not give musl $MUSL_VERSION (is bookworm's musl still $MUSL_VERSION?) in $SRC_DIR"
    run "dpkg-source -x $dsc failed" dpkg-source -x "$dsc" "$(src_tree)"
else
    step "fetch: source already in $(src_tree)"
fi
[[ -f "$(src_tree)/VERSION" && "$(cat "$(src_tree)/VERSION")" == "$MUSL_VERSION" ]] \
    || die "$(src_tree) is not musl $MUSL_VERSION"

# ---------------------------------------------------------------- 4. overlay
step "overlay: copy source to $BUILD_DIR and apply $OVERLAY"
rm -rf "$BUILD_DIR"
mkdir -p "$(dirname "$BUILD_DIR")"
cp -a "$(src_tree)" "$BUILD_DIR"
rm -rf "$BUILD_DIR/.pc" "$BUILD_DIR/debian"
(cd "$OVERLAY" && find . -type f ! -name '*~' | LC_ALL=C sort) | while read -r rel; do
    rel=${rel#./}
    dst="$BUILD_DIR/$rel"
    mkdir -p "$(dirname "$dst")"
    cp "$OVERLAY/$rel" "$dst"
    # A C/asm overlay source replaces musl's file of the same base name in the
    # same directory (e.g. clone.c replaces clone.s): musl's Makefile maps
    # both to one object, so the original must go.
    case "$rel" in
        src/*.c|src/*.s|src/*.S)
            base=${dst%.*}
            for ext in c s S; do
                if [[ "$base.$ext" != "$dst" && -e "$base.$ext" ]]; then
                    rm -f "$base.$ext"
                    echo "  removed ${rel%.*}.$ext" >>"$LOG"
                fi
            done ;;
    esac
done
# Nothing that traps may be left in the x86_64 sources (the objdump check
# at the end is the authoritative one).
left=$(cd "$BUILD_DIR" && {
    grep -lE '^[[:space:]]*([.A-Za-z0-9_]+:)?[[:space:]]*(syscall|sysenter|int[[:space:]]+\$(0x80|128))[[:space:]]*(#.*|/\*.*)?$' \
        src/*/x86_64/*.[sS] crt/x86_64/*.[sS] 2>/dev/null
    grep -l '"syscall' arch/x86_64/*.h
} || true)
[[ -z "$left" ]] || die "x86_64 sources still contain trapping instructions: $(echo $left)"

# ---------------------------------------------------------------- 5. configure
step "configure: --target=x86_64 --disable-shared CFLAGS=\"$MUSL_CFLAGS\""
STAGE="$SHOAL_CACHE/build/sysroot.new"
rm -rf "$STAGE"
run -C "$BUILD_DIR" "musl configure failed" \
    ./configure --target=x86_64 --prefix=/ --disable-shared --disable-wrapper \
        CC=gcc AR=ar RANLIB=ranlib CFLAGS="$MUSL_CFLAGS"

# ---------------------------------------------------------------- 6. build
step "make -j2"
t0=$SECONDS
run -C "$BUILD_DIR" "musl build failed" make -j2
step "make -j2: built in $((SECONDS - t0))s; make install"
run -C "$BUILD_DIR" "musl install failed" make install DESTDIR="$STAGE"
for f in libc.a crt1.o crti.o crtn.o libm.a libpthread.a librt.a libdl.a libutil.a libxnet.a libcrypt.a; do
    [[ -f "$STAGE/lib/$f" ]] || die "installed sysroot lacks lib/$f"
done
[[ -f "$STAGE/include/stdio.h" ]] || die "installed sysroot lacks include/stdio.h"

# ---------------------------------------------------------------- 7. check
step "check: no syscall/sysenter/int \$0x80 in lib/libc.a lib/crt*.o"
dis="$SHOAL_CACHE/build/libc.objdump"
objdump -dr "$STAGE"/lib/libc.a "$STAGE"/lib/*.o >"$dis" 2>>"$LOG" || die "objdump failed (log: $LOG)"
bad=$(grep -cE $'\t''(syscall|sysenter|int[[:space:]]+\$0x80)[[:space:]]*$' "$dis" || true)
if [[ "$bad" != 0 ]]; then
    # name the offending functions
    fns=$(awk '/^[0-9a-f]+ <.*>:$/ { fn = substr($2, 2, length($2) - 3) } /\t(syscall|sysenter|int +\$0x80) *$/ { print fn }' "$dis" | sort -u | tr '\n' ' ')
    die "$bad trapping instruction(s) left in libc: $fns(disassembly: $dis)"
fi
n=$(grep -cE 'R_X86_64_PLT32[[:space:]]+__shoal_syscall\b' "$dis" || true)
step "check: ok ($n call sites of __shoal_syscall)"

rm -rf "$SYSROOT"
mv "$STAGE" "$SYSROOT"
input_hash >"$STAMP"
step "done: $SYSROOT"
