"""How weft's FSDP (weft/_fsdp.py) cuts a module into units, as torch FSDP's auto-wrap does.

    units, params = plan_units(model, wrap_classes=[LlamaDecoderLayer])
    units    # [(qualified name, module)]: each becomes one shard group, gathered around its forward
    params   # [(unit index or None for the root unit, [(owner, attr, qualname), ...], parameter)]

A unit is gathered by hooks on its module's forward, so a unit must be a
module whose forward is called (module(x)) while its parameters are used.

Without wrap_classes each direct child is a unit, except containers, which
are recursed into: a module with no forward of its own (nn.ModuleList,
nn.ModuleDict, a holder class) is only a place its children are kept, and an
nn.Sequential is a chain of them, so their children are the units
(`model.layers` of a transformer gives one unit per block). nn.ParameterList
and nn.ParameterDict are never units: their parameters are read by the
parent's forward, so they join the unit of their parent.

wrap_classes (module classes, or class names as HF Accelerate's
`transformer_layer_cls_to_wrap` spells them) makes each outermost instance
of those classes a unit, as torch's ModuleWrapPolicy: `LlamaDecoderLayer`,
`nn.TransformerEncoderLayer`. Everything else is in the root unit.

A parameter belongs to the unit that holds every place it is registered at;
one shared across units (tied input and output embeddings), or by a module
registered under two names, goes to the root unit, which is gathered for the
whole step, as torch FSDP puts shared parameters in a common ancestor. A unit
whose forward runs more than once in a step is gathered for each call and its
gradients summed, as autograd sums them. Refused at construction, each with
the module or parameter named: a wrap_classes entry that is not a module
class or name, or matches nothing; a unit module without a forward of its
own; a unit whose parent reads its parameters directly (the out_proj of an
nn.MultiheadAttention); parameters that are not float32 (the shards are float32 masters:
compute in another dtype through MixedPrecision).
"""

import torch

_NO_FORWARD = torch.nn.Module.forward
_PARAM_HOLDERS = (torch.nn.ParameterList, torch.nn.ParameterDict)
# Modules whose forward reads their children's parameters without calling the children (MultiheadAttention
# passes out_proj.weight to F.multi_head_attention_forward): a child of one cannot be a unit.
_READ_CHILDREN = (torch.nn.MultiheadAttention,)


def _has_forward(m):
    return type(m).forward is not _NO_FORWARD


def _kind(m):
    return type(m).__name__


def _is_container(m):
    return isinstance(m, torch.nn.Sequential) or (not _has_forward(m) and not isinstance(m, _PARAM_HOLDERS))


def _matchers(wrap_classes):
    if isinstance(wrap_classes, (type, str)):
        wrap_classes = [wrap_classes]
    try:
        entries = list(wrap_classes)
    except TypeError:
        raise ValueError("weft FSDP: wrap_classes=%r is not a list of module classes or class names" %
                         (wrap_classes,)) from None
    for c in entries:
        if not isinstance(c, str) and not (isinstance(c, type) and issubclass(c, torch.nn.Module)):
            raise ValueError("weft FSDP: wrap_classes entry %r is neither a torch.nn.Module subclass nor a class "
                             "name" % (c,))
    return entries


def _matches(m, entry):
    return _kind(m) == entry if isinstance(entry, str) else isinstance(m, entry)


def _default_units(module):
    units = []

    def visit(prefix, m):
        for name, child in m.named_children():
            qual = prefix + name
            if _is_container(child):
                visit(qual + ".", child)
            elif not isinstance(child, _PARAM_HOLDERS) and any(True for _ in child.parameters()):
                units.append((qual, child))
    visit("", module)
    return units


def _class_units(module, wrap_classes):
    entries = _matchers(wrap_classes)
    units, matched = [], set()
    inside = set()  # ids of modules inside a unit already: only outermost instances are units
    for qual, m in module.named_modules():
        if m is module:
            continue
        hits = [i for i, e in enumerate(entries) if _matches(m, e)]
        if not hits:
            continue
        matched.update(hits)
        if id(m) in inside:
            continue
        if not _has_forward(m) or isinstance(m, _PARAM_HOLDERS):
            raise ValueError("weft FSDP: wrap_classes makes %s (%s) a unit, but %s has no forward of its own: its "
                             "children run without it, so it would never be gathered; name the block class it "
                             "holds instead" % (qual, _kind(m), _kind(m)))
        inside.update(id(x) for x in m.modules())
        if any(True for _ in m.parameters()):
            units.append((qual, m))
    for i, e in enumerate(entries):
        if i not in matched:
            kinds = sorted({_kind(m) for m in module.modules() if m is not module and _has_forward(m)})
            raise ValueError("weft FSDP: wrap_classes entry %r matches no module of %s (its module classes: %s)" %
                             (getattr(e, "__name__", e), _kind(module), ", ".join(kinds) or "none"))
    return units


def _refuse_read_children(module, units):
    parents = {qual: m for qual, m in module.named_modules()}
    for qual, m in units:
        parent = qual.rpartition(".")[0]
        if isinstance(parents[parent], _READ_CHILDREN):
            raise ValueError("weft FSDP: %s (%s) cannot be a unit: its parent %s (%s) reads its parameters in its "
                             "own forward without calling it; make the parent, or the block holding it, the unit" %
                             (qual, _kind(m), parent or "the root", _kind(parents[parent])))


def plan_units(module, wrap_classes=None):
    """(units, params) for `module`: see the module docstring."""
    units = _class_units(module, wrap_classes) if wrap_classes else _default_units(module)
    _refuse_read_children(module, units)
    prefixes = [qual + "." for qual, _ in units]

    def unit_of(qualname):
        for i, p in enumerate(prefixes):
            if qualname.startswith(p):
                return i
        return None

    aliases, order = {}, []
    for mname, m in module.named_modules(remove_duplicate=False):
        for attr, p in m._parameters.items():
            if p is None:
                continue
            qual = (mname + "." if mname else "") + attr
            if id(p) not in aliases:
                aliases[id(p)] = (p, [])
                order.append(id(p))
            aliases[id(p)][1].append((m, attr, qual))  # every path: a module shared by two has both
    params = []
    for pid in order:
        p, names = aliases[pid]
        if not p.is_floating_point():
            raise ValueError("weft FSDP: parameter %s is %s; weft shards floating-point parameters only (keep "
                             "other state in a buffer)" % (names[0][2], p.dtype))
        if p.dtype != torch.float32:
            raise ValueError("weft FSDP: parameter %s is %s; weft's shards are float32 masters: pass the module in "
                             "float32 and compute in %s with MixedPrecision(param_dtype=%s)" %
                             (names[0][2], p.dtype, p.dtype, p.dtype))
        homes = {unit_of(q) for _, _, q in names}
        params.append((homes.pop() if len(homes) == 1 else None, names, p))
    return units, params
