"""The protocol and pipeline contract that every other package imports (nothing it imports).

- constants.py: sizes, ops, flags, stats reasons, lengths, read from p4src/include/*.p4;
  standard library only.
- names.py: P4Runtime object names and pinned ids (p4src/include/ids.p4), the `lookup{i}`
  naming of the HotKeyLookup instances.
- p4files.py: the readers of those P4 files, and where p4src/ and the committed P4Info are.
- codec.py: the fast struct codec of the hotagg header and of raw frames (numpy, no Scapy).
- layers.py: the Scapy layers, the reference representation the codec is tested against.
- freqfile.py: the PS's key frequency files (CSV, .npz, the memory-mapped .live): their
  writers and their one reader (numpy).
- clihelp.py: the `--help` formatter of every command line (each option's default shown);
  standard library only.

Importing the package imports none of its modules, so `import contract.constants` stays free
of Scapy and numpy.
"""
