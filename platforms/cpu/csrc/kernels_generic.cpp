// The kernels in the compiler's baseline instruction set (any CPU this package runs on).
#include "kernels.h"
#include <cstring>
#define PAGODA_ISA generic
#include "kernels.inc"
