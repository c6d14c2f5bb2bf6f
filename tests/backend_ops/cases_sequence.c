/* Backend-ops cases: sequence (being written). */
#include "bo.h"

const bo_case bo_cases_sequence[] = {{0}};
const size_t bo_cases_sequence_count = 0;
