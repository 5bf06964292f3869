// sj_kernels.cu -- the translation unit NVRTC compiles.  The runtime names
// one template instantiation per program (a name expression, see
// runtime/spec.c); everything else stays uninstantiated.
#include "sj_common.cuh"
#include "sj_quant.cuh"
#include "sj_attn_mma.cuh"
#include "sj_attn_wgmma.cuh"
#include "sj_reference.cuh"
