"""gpuhint on Kueue: map QSSF hints onto WorkloadPriorityClasses of waiting Workloads.

``policy`` decides (pure), ``objects`` reads API objects (pure), ``kube`` talks to the
API server, ``applier`` runs passes, ``memory`` is the in-memory twin of a cluster.
See docs/kubernetes.md.
"""
