"""What this machine's cores afford: the packet load a scenario offers
(:mod:`.load_model`), priced with the measured profile (:mod:`.cores`), the profile's safe
storage (:mod:`.calibration_store`), and a scenario's budget and its ``auto`` link rates
(:mod:`.scenario`). Pure but for the profile's file; ``testbed calibrate`` itself runs a fabric,
so it lives in :mod:`testbed.run.calibrate`.

May import: config, machine, topology.
"""
