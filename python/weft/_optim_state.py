"""Full optimizer state for weft.torch.FullyShardedDataParallel (weft/_fsdp.py).

An optimizer built on the wrapper's .parameters() keeps, per unit, state for
one flat fp32 shard parameter. Entries shaped like that shard (AdamW's
exp_avg and exp_avg_sq, SGD's momentum_buffer) are per-element: they are
gathered into full tensors shaped like the module's parameters and scattered
back into shards with the shard group's own layout (weftShardGroupGatherFullFrom,
weftShardGroupScatterFullInto), one unit at a time. Other entries (AdamW's
step) are the same on every rank and copied.

    osd = model.full_optim_state_dict(opt)            # rank 0: {"state": {name: {...}}, "param_groups": [...]}
    model.load_full_optim_state_dict(new_opt, osd)    # osd is only read on rank 0
"""

import copy
import pickle

import torch


def _shard_shaped(v, unit):
    return torch.is_tensor(v) and v.dtype == torch.float32 and v.shape == unit.master.shape


def _unit_of(fsdp, optimizer):
    units = {id(u.shard_param): u for u in fsdp._units}
    for gi, group in enumerate(optimizer.param_groups):
        for p in group["params"]:
            if id(p) not in units:
                raise ValueError("weft FSDP: optimizer param_groups[%d] holds a tensor that is not one of this "
                                 "wrapper's .parameters() (shape %s)" % (gi, tuple(p.shape)))
    return units


def gather(fsdp, optimizer, rank0_only=True):
    fsdp._close_step()
    units = _unit_of(fsdp, optimizer)
    root = 0 if rank0_only else -1
    mine = not rank0_only or fsdp.comm.rank == 0
    out = {}
    for unit in fsdp._units:
        st = optimizer.state.get(unit.shard_param, {})
        names = [(q, p) for _, _, q, p in unit.entries]
        for q, _ in names:
            out[q] = {}
        for key in sorted(st):  # the same keys on every rank: the same collectives
            v = st[key]
            if _shard_shaped(v, unit):
                fulls = [torch.empty(p.numel(), dtype=torch.float32) for _, p in names]
                unit.group.gather_full(fulls if mine else [], root=root, shard=v.detach().contiguous())
                for (q, p), f in zip(names, fulls):
                    out[q][key] = f.view(p.shape)
            else:
                for q, _ in names:
                    out[q][key] = v.detach().to("cpu", copy=True) if torch.is_tensor(v) else copy.deepcopy(v)
    if not mine:
        return {}
    groups = []
    for group in optimizer.param_groups:
        g = {k: copy.deepcopy(v) for k, v in group.items() if k != "params"}
        g["params"] = [q for p in group["params"] for _, _, q, _ in units[id(p)].entries]
        groups.append(g)
    return {"state": {q: s for q, s in out.items() if s}, "param_groups": groups}


def _plan(fsdp, optimizer, state):
    """Root: what each unit's state is made of, checked against the wrapper before anything moves."""
    per_name = state["state"]
    plan = []
    for unit in fsdp._units:
        names = [(q, p) for _, _, q, p in unit.entries]
        have = [q for q, _ in names if q in per_name]
        if not have:
            plan.append([])
            continue
        if len(have) != len(names):
            raise ValueError("weft FSDP: the optimizer state has %s but not %s (one unit, whose state is one shard)"
                             % (have[0], [q for q, _ in names if q not in per_name][0]))
        first = per_name[names[0][0]]
        entries = []
        for key in sorted(first):
            v = first[key]
            if torch.is_tensor(v) and v.shape == names[0][1].shape and v.is_floating_point():
                for q, p in names:
                    w = per_name[q].get(key)
                    if not torch.is_tensor(w) or w.numel() != p.numel():
                        raise ValueError("weft FSDP: optimizer state[%r][%r] should be a tensor of %d elements, "
                                         "got %r" % (q, key, p.numel(), getattr(w, "shape", w)))
                entries.append((key, "shard", None))
            else:
                entries.append((key, "copy", v))
        plan.append(entries)
    groups = state["param_groups"]
    if len(groups) != len(optimizer.param_groups):
        raise ValueError("weft FSDP: the state has %d param_groups, the optimizer %d" %
                         (len(groups), len(optimizer.param_groups)))
    return plan, [{k: v for k, v in g.items() if k != "params"} for g in groups]


def _broadcast_object(comm, obj, root, device):
    """Root's picklable obj on every rank, through tensors on `device` (the communicator's memory)."""
    data = pickle.dumps(obj) if comm.rank == root else b""
    n = torch.tensor([len(data)], dtype=torch.int64, device=device)
    comm.broadcast(n, root=root)
    buf = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device) if comm.rank == root else \
        torch.empty(int(n.item()), dtype=torch.uint8, device=device)
    comm.broadcast(buf, root=root)
    return pickle.loads(buf.cpu().numpy().tobytes())


def scatter(fsdp, optimizer, state, root=0):
    fsdp._close_step()
    _unit_of(fsdp, optimizer)
    me = fsdp.comm.rank == root
    if me:
        try:
            msg = ("ok",) + _plan(fsdp, optimizer, state)
        except (KeyError, TypeError, ValueError) as e:  # every rank raises it, none waits
            msg = ("error", "%s: %s" % (type(e).__name__, e))
    msg = _broadcast_object(fsdp.comm, msg if me else None, root, fsdp._device)
    if msg[0] == "error":
        raise ValueError("weft FSDP: rank %d refused the optimizer state: %s" % (root, msg[1]))
    _, plan, hyper = msg
    for unit, entries in zip(fsdp._units, plan):
        new = {}
        for key, kind, value in entries:
            if kind == "shard":
                shard = torch.zeros_like(unit.master)
                fulls = [state["state"][q][key].detach().to("cpu", torch.float32).contiguous().view(-1)
                         for _, _, q, _ in unit.entries] if me else []
                fsdp._sync()  # the zeros are written on the compute stream, the scatter on the group's
                unit.group.scatter_full(fulls, root=root, shard=shard)
                new[key] = shard
            else:
                new[key] = value.clone() if torch.is_tensor(value) else value
        if new:
            optimizer.state[unit.shard_param] = new
        else:
            optimizer.state.pop(unit.shard_param, None)
    for group, h in zip(optimizer.param_groups, hyper):
        group.update(h)
