"""What a run needs around the models: the device (device), time budgets and stop signals
(cancellation), memory release (memory), and failures made into the core's errors (failures)."""
