"""`python -m tf_backend ab ...` / `python -m tf_backend bench ...`: the `tfb` command."""
import sys

from .cli import main

sys.exit(main())
