# The Python no-op (beside the Node.js one of node/noop.js): answers at once.
def handle(req):
    return "noop\n"
