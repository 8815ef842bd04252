"""vsnap-qual's qualification suites, shipped inside the package as ``vsnap_qual.suites``
(``pytest --pyargs vsnap_qual.suites``); the source is this top-level ``suites/`` directory."""
