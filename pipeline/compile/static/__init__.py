"""The static npu graph flavour (`specdec compile --target npu`): standard ops, q × context bucket variants."""
