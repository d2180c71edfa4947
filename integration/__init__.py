"""Model zoo, suites and benchmarks (run from the repository root)."""


def parse_setting(spec):
    """`MODULE:ATTR=VALUE` (VALUE a Python literal) -> (module, attr, value cast to the type of
    the attribute's current value); the module is imported, the attribute must exist."""
    import ast
    import importlib
    target, value = spec.split("=", 1)
    mod, attr = target.split(":")
    m = importlib.import_module(mod)
    return m, attr, type(getattr(m, attr))(ast.literal_eval(value))
