"""Broken: the extracted code does not even parse (the solution is the string below)."""

CHEAT = {"problem": "softmax", "fools_naive": None, "stage": "static", "expect": "syntax error",
         "solution": "import torch\nimport triton\n\nclass ModelNew(torch.nn.Module:\n"
                     "    def forward(self, x):\n        return x\n"}
