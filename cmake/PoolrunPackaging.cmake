# What `cmake --install` puts where, beyond the programs (each part installs its own), and the
# Debian packages CPack makes of it (docs/operations.md, "Packages"):
#   poolrun      poolrun, poolrun-rank, poolrun-sim-agent, poolctl, poolrun-cuda-probe, the NCCL
#                tuner plugin (lib/, where NCCL's dlopen finds libnccl-tuner-poolrun.so), the TLS
#                module (lib/poolrun), the documentation (share/doc/poolrun)
#   poold        poold and poold.service (its user `poold` made at install)
#   poold-agent  poold-agent and poold-agent.service
# `cpack -G DEB` in the build folder writes them to packages/ (scripts/build-packages.sh).

include(GNUInstallDirs)

# A systemd unit made from its template at install time, so that its ExecStart names the programs
# where this install puts them (/usr/bin from a package, PREFIX/bin from `cmake --install --prefix`).
function(poolrun_install_unit template component)
  get_filename_component(unit ${template} NAME_WLE)
  install(CODE "
    set(POOLRUN_BINDIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}\")
    set(POOLRUN_DOCDIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_DATAROOTDIR}/doc/poolrun\")
    configure_file(\"${template}\" \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/lib/systemd/system/${unit}\" @ONLY)
    message(STATUS \"Installing: \$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/lib/systemd/system/${unit}\")"
    COMPONENT ${component})
endfunction()

poolrun_install_unit(${PROJECT_SOURCE_DIR}/packaging/poold.service.in poold)
poolrun_install_unit(${PROJECT_SOURCE_DIR}/packaging/poold-agent.service.in poold-agent)

# The documentation, where a packaged install's users find it (the dashboard is built into poold).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/poolrun
  COMPONENT poolrun FILES_MATCHING PATTERN "*.md")
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/poolrun
  COMPONENT poolrun)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME poolrun)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "poolrun maintainers <poolrun@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "GPU pool and launcher for MPI/NCCL jobs")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/packages)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL poolrun poold poold-agent)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
# Dependencies from the programs' shared libraries (dpkg-shlibdeps), and what they run or open.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_POOLRUN_PACKAGE_NAME poolrun)
set(CPACK_DEBIAN_POOLRUN_PACKAGE_RECOMMENDS "openmpi-bin, hwloc, libmunge2")
set(CPACK_COMPONENT_POOLRUN_DESCRIPTION
  "poolrun, the launcher: takes GPUs from a pool, binds ranks to GPUs, NICs and cores, starts them\nwith Open MPI; poolctl; the NCCL tuner plugin; the documentation.")
set(CPACK_DEBIAN_POOLD_PACKAGE_NAME poold)
set(CPACK_DEBIAN_POOLD_PACKAGE_RECOMMENDS "poolrun (= ${PROJECT_VERSION})")
set(CPACK_DEBIAN_POOLD_PACKAGE_SUGGESTS "munge, etcd-server")
set(CPACK_COMPONENT_POOLD_DESCRIPTION
  "poold, the GPU pool's server: leases, queue, placement, agents' heartbeats, HTTPS, MUNGE,\nreplicas on etcd; its systemd unit, run as the user poold.")
set(CPACK_DEBIAN_POOLD_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/packaging/poold/postinst)
set(CPACK_DEBIAN_POOLD-AGENT_PACKAGE_NAME poold-agent)
# The TLS module (https:// pools) is poolrun's.
set(CPACK_DEBIAN_POOLD-AGENT_PACKAGE_DEPENDS "poolrun (= ${PROJECT_VERSION})")
set(CPACK_COMPONENT_POOLD-AGENT_DESCRIPTION
  "poold-agent, the node agent: registers a GPU node with poold (or joins it with a one-time\ntoken) and sends its GPUs' and NICs' telemetry; its systemd unit.")
include(CPack)
