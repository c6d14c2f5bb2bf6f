#include "bo.h"
const bo_case bo_cases_basic[] = {{0}};
const size_t bo_cases_basic_count = 0;
