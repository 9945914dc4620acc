"""``python -m nbest_rescore`` = the ``nbest-rescore`` command."""
from .cli import main

if __name__ == "__main__":
    main()
