"""Each family's embedding and head rows, one module per family; importing a module registers
it (``@register_family``), so a new family is one new file here."""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
