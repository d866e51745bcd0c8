#!/usr/bin/env bash
# tests/gpu/carry_ucx.sh — UCX for a GPU machine that has none (libpstate needs it to build).
#
# A lent GPU machine may have CUDA, NCCL and a compiler but no UCX, and nothing can be installed
# there. This packs this (Debian) machine's UCX — the libraries with the shared-memory module,
# libnuma, the headers, the pkg-config files and pkg-config itself — into a folder that travels
# with the working tree, and, sourced there, points the build at it:
#
#   tests/gpu/carry_ucx.sh pack [DIR]        here (DIR default .ucx; add it to .git/info/exclude)
#   source tests/gpu/carry_ucx.sh use [DIR]  there, then: tests/gpu/run.sh
#
# Only the pkg-config prefix is rewritten there (the folder's path is known only then). The
# InfiniBand and RDMA modules stay behind (they need libibverbs): UCX runs without them. `use`
# changes no shell option of the shell that sources it.
verb=${1:-}
dir=$(realpath -m "${2:-.ucx}")
lib=/usr/lib/x86_64-linux-gnu
case "$verb" in
  pack)
    set -euo pipefail
    rm -rf "$dir"
    mkdir -p "$dir/lib/ucx" "$dir/lib/pkgconfig" "$dir/include" "$dir/bin"
    cp -a "$lib"/libuc[mpst]*.so* "$dir/lib/"
    cp -a "$lib"/ucx/libuct_cma.so* "$dir/lib/ucx/"
    cp -aL /lib/x86_64-linux-gnu/libnuma.so.1 "$dir/lib/"
    cp -a /usr/include/ucp /usr/include/uct /usr/include/ucs /usr/include/ucm "$dir/include/"
    cp "$lib"/pkgconfig/ucx.pc "$lib"/pkgconfig/ucx-uct.pc "$lib"/pkgconfig/ucx-ucs.pc "$dir/lib/pkgconfig/"
    cp -L "$(command -v pkg-config)" "$dir/bin/pkg-config"
    cp -L "$(ldd "$dir/bin/pkg-config" | awk '/libpkgconf/{print $3}')" "$dir/lib/"
    echo "carry_ucx.sh: packed $(du -sh "$dir" | cut -f1) into $dir"
    ;;
  use)
    sed -i "s|^prefix = .*|prefix = $dir|; s|^libdir = .*|libdir = \${prefix}/lib|" "$dir"/lib/pkgconfig/*.pc
    export PATH=$PATH:$dir/bin LD_LIBRARY_PATH=$dir/lib:${LD_LIBRARY_PATH:-} PKG_CONFIG_PATH=$dir/lib/pkgconfig \
      CPATH=$dir/include
    ;;
  *) echo "usage: tests/gpu/carry_ucx.sh pack|use [DIR]" >&2; return 2 2>/dev/null || exit 2 ;;
esac
