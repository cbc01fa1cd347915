"""ngym plugin: Open Reward Standard environments (``ngym install ors:<folder | distribution>``)."""
