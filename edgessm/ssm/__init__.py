"""State-space layers: the math of the Centaurus blocks, readable next to the paper.

Modules:
    discretize  diagonal modes, S4D-Lin initialisation, ZOH transition, powers of Ā
    kernels     kernel generation without materialising basis kernels (the paper's get_kernel)
    fftconv     causal FFT convolution, the bottleneck contraction planner and its FLOP model
    blocks      depthwise (S4D), pointwise bottleneck (S5), bottleneck and full SSM blocks
    rtf         the rational transfer function block (RTF): state-free FFT kernel, direct-form streaming
    hades       the HADES selective filter bank: shared and routed expert heads, chunked scan, streaming step
    factory     every block kind by name: make_ssm
    hankel      the Hankel spectral basis of ES-SSM (float64, cached)
    distill     SpectraLDS: the Hankel filters distilled into a prefix-nested decaying LDS
    essm        the elastic spectral SSM (ES-SSM): gate, runtime budget, budget dropout, FIR/LDS streaming
    filterbank  the filterbank front end: one full block's ERB-spaced filters, pooled log band energies
    resample    causal pooling, strided / transposed convolutions, causal depthwise Conv1d
    residual    the Centaurus residual block (Fig. 5)
    stream      the streaming contract (``forward`` beside ``step``), counts, helpers
"""

from .blocks import BottleneckSSM, DepthwiseSSM, FullSSM, PointwiseBottleneckSSM, SSMLayer
from .essm import BudgetDropout, ElasticBudget, ElasticSpectralSSM, sample_train_budget, set_budget
from .factory import BLOCK_KINDS, SSM_KINDS, make_ssm
from .fftconv import Plan, bottleneck_flops, causal_conv, cheapest_plan, plan_bottleneck
from .filterbank import FilterbankFront
from .hades import HadesSSM, auxiliary_loss
from .resample import AvgPool, CausalDepthwiseConv, DownConv, UpConv
from .residual import CentaurusBlock, ChannelNorm, trainable_parameters
from .rtf import RationalSSM
from .stream import Counts, Streamable, StreamSequential, flops_per_second, run_chunked

__all__ = [
    "BLOCK_KINDS",
    "SSM_KINDS",
    "AvgPool",
    "BottleneckSSM",
    "BudgetDropout",
    "CausalDepthwiseConv",
    "CentaurusBlock",
    "ChannelNorm",
    "Counts",
    "DepthwiseSSM",
    "DownConv",
    "ElasticBudget",
    "ElasticSpectralSSM",
    "FilterbankFront",
    "FullSSM",
    "HadesSSM",
    "Plan",
    "PointwiseBottleneckSSM",
    "RationalSSM",
    "SSMLayer",
    "StreamSequential",
    "Streamable",
    "UpConv",
    "auxiliary_loss",
    "bottleneck_flops",
    "causal_conv",
    "cheapest_plan",
    "flops_per_second",
    "make_ssm",
    "plan_bottleneck",
    "run_chunked",
    "sample_train_budget",
    "set_budget",
    "trainable_parameters",
]
