#!/bin/sh
# The installed API stands on its own: a program that includes only
# <pipedream.h> compiles warning-free as C11 and as C++ and links against
# libpipedream; pipedream.pc is valid and names the library.
set -eu
: "${top_builddir:?run under make check}" "${top_srcdir:?run under make check}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat > "$work/use.c" <<'C'
#include <pipedream.h>
#include <stdio.h>

int main(void)
{
    pd_device *dev;
    pd_graph *g;
    pd_shape shape = pd_shape_make(2, (int64_t)2, (int64_t)3);
    int x, y;
    float in[6] = {-1, 2, -3, 4, -5, 6}, out[6];

    if (pd_device_open("cpu", &dev) != PD_OK || pd_graph_create(dev, 1, &g) != PD_OK ||
        pd_graph_input(g, "x", PD_F32, &shape, false, &x) != PD_OK || pd_graph_relu(g, "relu", x, &y) != PD_OK ||
        pd_graph_allocate(g) != PD_OK ||
        pd_tensor_copy_from_host(pd_graph_output(g, x), in, sizeof(in)) != PD_OK ||
        pd_graph_forward(g, 0, false) != PD_OK ||
        pd_tensor_copy_to_host(pd_graph_output(g, y), out, sizeof(out)) != PD_OK) {
        fprintf(stderr, "use: %s\n", pd_last_error());
        return 1;
    }
    pd_graph_destroy(g);
    pd_device_close(dev);
    return out[0] == 0.0f && out[1] == 2.0f && out[5] == 6.0f ? 0 : 1;
}
C
libs="-L$top_builddir/src/.libs -Wl,-rpath,$top_builddir/src/.libs -lpipedream"
${CC:-cc} -std=c11 -Wall -Wextra -Werror -pedantic -I"$top_srcdir/include" -o "$work/use" "$work/use.c" $libs
"$work/use"
echo "C11 program using <pipedream.h>: compiled -Wall -Wextra -pedantic clean, ran"

if command -v c++ >/dev/null 2>&1; then
    cp "$work/use.c" "$work/use.cc"
    c++ -Wall -Wextra -Werror -I"$top_srcdir/include" -o "$work/use_cxx" "$work/use.cc" $libs
    "$work/use_cxx"
    echo "the same program as C++: compiled and ran"
fi

PKG_CONFIG_PATH="$top_builddir" pkg-config --validate pipedream
PKG_CONFIG_PATH="$top_builddir" pkg-config --libs pipedream | grep -q -- '-lpipedream'
echo "pipedream.pc: valid, links -lpipedream"
