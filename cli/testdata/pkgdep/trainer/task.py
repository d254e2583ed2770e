"""Never runs: the package's dependency is nowhere (TestPackageJob)."""
import trainflow_no_such_dependency  # noqa: F401
