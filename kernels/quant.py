"""The quantized matrix products under their earlier module name (the code now lives in
qtypes.py, simd.py, blocks.py, matmul.py, matmul_q8.py and matmul_cuda.py; see kernels/__init__.py).
"""
from .matmul import (SERIAL_MAX_ELEMENTS, dequant_row, dequantize, matmul,  # noqa: F401
                     matmul_ref)
from .matmul_cuda import (CUDA_MAX_THREADS, CUDA_ROWS_PER_PASS, DeviceWeight,  # noqa: F401
                          cuda_kernels, dequant_rows_cuda, matmul_bandwidth, matmul_cuda,
                          mm_config, upload_weight)
from .matmul_q8 import Q8_QTYPES, _matmul_q8, has_q8_kernel, matmul_q8  # noqa: F401
from .qtypes import (BF16, F16, F32, Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1,  # noqa: F401
                     Q5_K, Q6_K, Q8_0, K_QTYPES, SUPPORTED_QTYPES, check_qtype, qtype_name,
                     random_blocks,
                     row_bytes)

_check_qtype = check_qtype
_random_weights = random_blocks
