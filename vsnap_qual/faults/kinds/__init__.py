"""The fault kinds, one module each, in the shape of pytest-xdist's ``scheduler/``: each module exports its
``KINDS`` (a :class:`vsnap_qual.faults.injector.Kind` per kind name: the injector, the frozen parameter type, the
``results.injected`` record type and the kind's own faults); ``vsnap_qual.faults.catalogue.BUILTIN`` is the one table
that gathers them. A conftest's kind is one module of the same shape (``docs/adding-a-fault.md``)."""
