"""Stand-in for ``smdistributed.dataparallel.exceptions``.

The SageMaker training toolkit imports this module and adds the name of every class in it to the
strings it scans stderr for (reference B7). The real class names are not public, so the stand-in
defines none: SMDDP's only publicly observed error is a plain ``RuntimeError`` (B4).
"""
