"""flashtrie.gpu_impl: the whole beam search in one cooperative CUDA kernel per batch (NVRTC + cuda.core).

`GpuSearcher(index)` uploads the index once and answers `search(proposals, config, prefixes)` bit for bit
like `NumpySearcher` (docs/semantics.md).  Importing this package needs only numpy; cuda.core is imported
when a searcher is built or a kernel compiled.  `build_index(keywords)` builds the index on the GPU (cupy,
imported when it runs) with the same arrays as `NarrowLoudsIndex.build`.
"""

from .build_gpu import build_index
from .compile import compile_kernel
from .searcher import GPU_MAX_BEAM, GPU_MAX_PROPOSALS, GPU_MAX_RESULTS, DeviceArray, GpuSearcher

__all__ = ["GpuSearcher", "DeviceArray", "build_index", "compile_kernel", "GPU_MAX_BEAM", "GPU_MAX_RESULTS",
           "GPU_MAX_PROPOSALS"]
