"""The method zoo: ``base`` (the contract), ``registry`` (the explicit list), one package per paper."""
