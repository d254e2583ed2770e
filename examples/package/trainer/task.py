"""A trainer package for `trainflow jobs submit training --package-path`
(docs/applications.md): it prints the role trainflow gave it and its
arguments, and writes its artifact into AIP_MODEL_DIR. A real trainer
reads TF_CONFIG (or MASTER_ADDR, RANK, WORLD_SIZE) the same way."""
import json
import os
import sys


def main():
    tf_config = json.loads(os.environ["TF_CONFIG"])
    task = tf_config["task"]
    print("role %s-%d of %s, args %s" % (task["type"], task["index"],
                                         sorted(tf_config["cluster"]), sys.argv[1:]))
    if task["type"] == "chief":
        with open(os.path.join(os.environ["AIP_MODEL_DIR"], "model.json"), "w") as f:
            json.dump({"args": sys.argv[1:]}, f)


if __name__ == "__main__":
    main()
