# Sourced by the integration tests that run `mpirun` on this machine.
# Skips the test (exit 77, saying why) in a build without MPI or without
# mpirun; sets `mpirun_flags`, `openmpi` (true or false) and exports what
# Open MPI needs here: it
# refuses root unless told, wants --oversubscribe for more ranks than cores,
# and talks over shared memory and TCP between ranks of one machine.
if ! grep -q '^#define HAVE_MPI 1' "${top_builddir:?top_builddir is not set}/config.h"; then
    echo "SKIP: this build has no MPI (configure found none)"
    exit 77
fi
if ! command -v mpirun >/dev/null 2>&1; then
    echo "SKIP: mpirun is not installed"
    exit 77
fi
mpirun_flags=
openmpi=false
if mpirun --version 2>&1 | grep -q "Open MPI"; then
    openmpi=true
    mpirun_flags=--oversubscribe
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
    case "$(mpirun --version 2>&1)" in
    *"Open MPI) "[1-4].*) : "${OMPI_MCA_btl:=self,vader,tcp}" ;;
    *) : "${OMPI_MCA_btl:=self,sm,tcp}" ;;
    esac
    export OMPI_MCA_btl
fi
