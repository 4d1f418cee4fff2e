"""The hotagg P4Runtime controller, layered like p4runtime-shell.

- client.SwitchClient: one session per switch (channel, arbitration, Write/Read, packets);
  errors.translate_rpc_error turns every grpc.RpcError into a ControllerError subclass.
- p4info.P4Info: name <-> id lookups and canonical value encoding; wire: fast bulk encoding.
- One class per P4 control of p4src/include/: forwarding.Forwarding, jobs.Jobs,
  hot_keys.HotKeys, drop_sim.DropSim, stats.Stats.
- hotset: choosing hot keys from update statistics (pure).
- cli / commands: the hotagg-ctl command line (`python -m controller`).
"""
