"""Sets one value of a JSON file in place: patch_json.py FILE KEY.KEY... VALUE
(VALUE is JSON text)."""
import json
import sys

path, keys, value = sys.argv[1], sys.argv[2].split("."), json.loads(sys.argv[3])
data = json.load(open(path))
node = data
for key in keys[:-1]:
    node = node[key]
node[keys[-1]] = value
json.dump(data, open(path, "w"))
