/* (being written) */
#include "config.h"

#include "cli/pd_cli.h"

int pd_cli_profile(int argc, char **argv)
{
    pd_cli_error("profile: not available in this build yet");
    return PD_CLI_FAILURE;
}
