"""The kernel registry: name -> spec, collected from each kernel's own ``SPEC`` (``samplers.spec``).

The order is the one front ends list the kernels in.
"""

from __future__ import annotations

from .adam_sgld import AdamSGLD
from .adaptive_mh import AdaptiveMH
from .demcz import DEMCZ
from .eqn import EQN
from .gibbs import Gibbs
from .hmc import HMC
from .mala import MALA
from .mclmc import MCHMC, MCLMC
from .nuts import NUTS
from .reprior_lmc import RepriorLMC
from .rmsprop_sgld import RMSPropSGLD
from .rwmh import RWMH
from .sghmc import SGHMC
from .sgld import SGLD, ULA
from .sgnht import SGNHT
from .sgrld import SGRLD
from .slice import EllipticalSlice, Slice
from .spec import KernelSpec
from .splitting import SCHEME_SPECS, Splitting
from .svgd import SVGD

KERNELS = (SGLD, RMSPropSGLD, AdamSGLD, SGHMC, SGNHT, SGRLD, ULA, MALA, HMC, RWMH, RepriorLMC)
KERNELS += (NUTS, AdaptiveMH, SVGD, EQN)
KERNELS += (MCLMC, MCHMC, Slice, EllipticalSlice, Gibbs, DEMCZ)  # issue 59
SPECS: list[KernelSpec] = [*(k.SPEC for k in KERNELS), *SCHEME_SPECS, Splitting.SPEC]

REGISTRY: dict[str, KernelSpec] = {spec.name: spec for spec in SPECS}
