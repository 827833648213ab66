import sys

from edgessm.bench import BENCHMARKS, run

if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
    names = ",".join(BENCHMARKS)
    print(f"usage: python -m edgessm.bench {{{names}}} [options]  (--help after the name for its options)")
    sys.exit(0 if len(sys.argv) >= 2 else 2)
sys.exit(run(sys.argv[1], sys.argv[2:]))
