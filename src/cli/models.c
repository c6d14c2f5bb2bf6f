/* (being written) */
#include "config.h"

#include "cli/pd_cli.h"

int pd_cli_models(int argc, char **argv)
{
    pd_cli_error("models: not available in this build yet");
    return PD_CLI_FAILURE;
}

int pd_cli_model_info(int argc, char **argv)
{
    pd_cli_error("model-info: not available in this build yet");
    return PD_CLI_FAILURE;
}
