/* Backend-ops cases: norm_loss (being written). */
#include "bo.h"

const bo_case bo_cases_norm_loss[] = {{0}};
const size_t bo_cases_norm_loss_count = 0;
