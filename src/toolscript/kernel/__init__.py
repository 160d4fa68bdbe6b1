"""The kernel: runs inside the script's interpreter. Standard library only.

Nothing here imports anything else of toolscript: the host starts it under whichever Python
the user chooses, loading this folder as a standalone package.
"""
