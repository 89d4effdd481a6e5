"""The Dask cluster's lifecycle: plan every process (:mod:`.spec`, pure), then start, watch
and stop them (:mod:`.base`, :mod:`.local`, :mod:`.srun`), or attach to a scheduler
somebody else runs (:mod:`.attach`); :mod:`.choose` picks one for the run."""
