#!/bin/sh
# The weight ring's unit test (tests/unit/test_weight_ring.c, with its
# multi-threaded stress test) built and run under ThreadSanitizer: any data
# race report fails. Skips (77) when the compiler or this machine cannot run
# TSan programs, or cmocka is missing.
set -eu
: "${top_builddir:?run under make check}" "${top_srcdir:?run under make check}"
cc=${CC:-cc}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat > "$work/probe.c" <<'C'
#include <pthread.h>
static int x;
static void *run(void *arg) { (void)arg; __atomic_fetch_add(&x, 1, __ATOMIC_SEQ_CST); return 0; }
int main(void) { pthread_t t; pthread_create(&t, 0, run, 0); pthread_join(t, 0); return x == 1 ? 0 : 1; }
C
if ! $cc -fsanitize=thread -O1 -g -pthread -o "$work/probe" "$work/probe.c" 2>"$work/probe.log"; then
    echo "SKIP: $cc cannot build with -fsanitize=thread: $(head -n 1 "$work/probe.log")"
    exit 77
fi
# TSan needs a memory layout some kernels' address randomisation breaks;
# setarch -R turns randomisation off for the run.
run=
if ! "$work/probe" >"$work/probe.log" 2>&1; then
    if command -v setarch >/dev/null 2>&1 && setarch "$(uname -m)" -R "$work/probe" >/dev/null 2>&1; then
        run="setarch $(uname -m) -R"
    else
        echo "SKIP: ThreadSanitizer programs do not run here: $(head -n 1 "$work/probe.log")"
        exit 77
    fi
fi

cmocka_cflags=$(pkg-config --cflags cmocka 2>/dev/null || true)
cmocka_libs=$(pkg-config --libs cmocka 2>/dev/null || echo -lcmocka)
if ! printf '#include <stdarg.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <setjmp.h>\n#include <cmocka.h>\nint main(void){return 0;}\n' |
        $cc $cmocka_cflags -x c -o "$work/cmocka_probe" - $cmocka_libs 2>/dev/null; then
    echo "SKIP: cmocka is not installed"
    exit 77
fi

$cc -std=c11 -fsanitize=thread -O1 -g -Wall -Wextra -Werror -Wno-unused-parameter \
    -I"$top_builddir" -I"$top_srcdir/include" -I"$top_srcdir/src" $cmocka_cflags \
    -o "$work/test_weight_ring" \
    "$top_srcdir/src/runtime/weight_ring.c" "$top_srcdir/src/core/status.c" "$top_srcdir/src/core/log.c" \
    "$top_srcdir/tests/unit/test_weight_ring.c" $cmocka_libs -pthread

status=0
TSAN_OPTIONS="halt_on_error=1 exitcode=66 ${TSAN_OPTIONS:-}" CMOCKA_MESSAGE_OUTPUT=stdout \
    timeout 300 $run "$work/test_weight_ring" >"$work/run.log" 2>&1 || status=$?
cat "$work/run.log"
if grep -q "ThreadSanitizer" "$work/run.log"; then
    echo "FAIL: ThreadSanitizer reported a problem"
    exit 1
fi
if [ "$status" -ne 0 ]; then
    echo "FAIL: test_weight_ring under ThreadSanitizer exited $status"
    exit 1
fi
echo "test_weight_ring ran clean under ThreadSanitizer"
