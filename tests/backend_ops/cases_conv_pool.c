/* Backend-ops cases: conv_pool (being written). */
#include "bo.h"

const bo_case bo_cases_conv_pool[] = {{0}};
const size_t bo_cases_conv_pool_count = 0;
