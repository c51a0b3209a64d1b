package maxreg
