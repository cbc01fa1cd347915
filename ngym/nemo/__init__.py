"""NeMo Gym environments under ngym: find them (the nemo-gym wheel or a folder), install them as ngym plugins,
run their own tests the way NeMo Gym's ``gym env test`` does.

The runtime half (``import nemo_gym`` resolving to ngym's implementation) is the ``ngym-nemo-gym``
distribution in ``plugins/ngym_nemo_gym``; this package is the tooling half and imports nothing from it.
"""
