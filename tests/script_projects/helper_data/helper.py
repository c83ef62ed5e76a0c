def read_values(path):
    with open(path, encoding="utf-8") as f:
        return [float(line) for line in f if line.strip()]
