"""Layer 2, planning: a validated grid -> trial specs, checkpoints, render and text sets, their content keys, what each
trial waits for, how the cluster is shared, and what it all costs. Pure: nothing here trains, renders or starts Ray."""
