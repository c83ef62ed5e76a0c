"""Remote machines in the GUI: the machines panel (`panel.MachinesPanel`), its dialogs and the
cluster doctor. Nothing is imported here: the main window imports this package's modules
while it starts, and the panel (paramiko, keyring) is built only after the window has
painted."""
