"""The thin click CLI: `main.py` is the `evalctl` root group; each module adds the commands of one job."""
