"""What a run needs around the models: the device, cancellation and time budgets, memory release."""
