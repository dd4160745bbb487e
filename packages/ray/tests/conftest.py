import os

# One thread per actor and in the test process alike: the same kernels, the same sums.
os.environ.setdefault("NNPLUG_CPU_THREADS", "1")
