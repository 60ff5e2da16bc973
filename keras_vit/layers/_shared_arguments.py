"""Arguments one layer class declares and a sibling class takes by keyword, declared once.

`DifferentialAttention` takes `MultiHeadSelfAttention`'s core arguments, `ParallelScalingBlock`
the block arguments of `keras_vit.layers.block_base.COMMON_ARGUMENTS`, `NaFlexRotaryEmbedding`
`RotaryEmbedding2D`'s but `patch_size`. The sibling pops them from its `**kwargs` with the
declaring class's defaults (`take`), and `shows_keywords` puts them in its `inspect.signature`
(help(), IDEs, the tests' config completeness check) as keyword-only parameters: neither the
names nor the defaults are written twice.
"""

import inspect


def declared_defaults(init, names=None, *, leave_out=()):
    """`{name: default}` of the parameters `names` (None: all with a default) of `init`'s
    signature, without those in `leave_out`, in the signature's order."""
    parameters = inspect.signature(init).parameters
    if names is None:
        names = [n for n, p in parameters.items() if p.default is not inspect.Parameter.empty]
    return {name: parameters[name].default for name in names if name not in leave_out}


def take(kwargs, defaults):
    """`{name: kwargs.pop(name, default)}` for each of `defaults` (`kwargs` loses them)."""
    return {name: kwargs.pop(name, default) for name, default in defaults.items()}


def shows_keywords(defaults):
    """Decorator: `__init__(self, ..., **kwargs)` shown with `defaults` as keyword-only
    parameters (after its positional ones, before its own keyword-only ones)."""

    def decorate(init):
        signature = inspect.signature(init)
        kinds = inspect.Parameter
        params = list(signature.parameters.values())
        positional = [p for p in params if p.kind in (kinds.POSITIONAL_ONLY,
                                                      kinds.POSITIONAL_OR_KEYWORD)]  # fmt: skip
        own = [p for p in params if p.kind is kinds.KEYWORD_ONLY]
        rest = [p for p in params if p.kind is kinds.VAR_KEYWORD]
        shared = [kinds(name, kinds.KEYWORD_ONLY, default=d) for name, d in defaults.items()]
        init.__signature__ = signature.replace(parameters=positional + shared + own + rest)
        return init

    return decorate
