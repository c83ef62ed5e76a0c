"""Machines: the registered ones, this machine's hardware, the doctor that compares them."""
